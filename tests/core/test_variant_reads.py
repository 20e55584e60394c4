"""The read recorder of `tests.variant_reads` can fail: it reports a field nobody reads, and does not
count validation, equality, hashing, ``replace``, ``to_dict``, the unread-settings check or ``--set``
parsing as reads."""

from __future__ import annotations

import dataclasses
import pathlib
import re

from tests.variant_reads import unread_fields
from transformer_jax.core import configlib, unread
from transformer_jax.core.configlib import Variant, setting
from transformer_jax.core.overrides import apply_overrides


@dataclasses.dataclass(frozen=True)
class _Probe(configlib.Config):
    PATH = "probe"
    used: int = setting(1, ge=1)
    unused: int = setting(2, ge=1)

    def check(self) -> None:
        if self.used > 100 and self.unused > 100:
            configlib.fail("probe.used", self.used, "too large")


def test_a_field_only_validated_compared_hashed_or_dumped_is_unread():
    cfg = _Probe()

    def consume() -> int:
        configlib.to_dict(cfg)
        hash(cfg)
        assert cfg == _Probe()
        dataclasses.replace(cfg, used=3)
        unread.check_reads(cfg)
        apply_overrides(cfg, ["used=4"])
        return cfg.used * 2

    assert unread_fields(consume, cfg) == ["unused"]


def test_reading_every_field_reports_none():
    cfg = _Probe()
    assert unread_fields(lambda: cfg.used + cfg.unused, cfg) == []
    assert "__getattribute__" not in _Probe.__dict__


# Groups read whole by construction, not by a consumer a read test could run.
_READ_WHOLE = {"MeshConfig": "MeshConfig.sizes() reads every axis by name (MESH_AXES)"}


def test_every_settings_family_and_group_is_named_by_a_read_test():
    """Each `Variant` family (its base class: the read tests enumerate its ``VARIANTS``) and each plain
    settings group appears in a test that runs a consumer under `tests.variant_reads`; a new family
    or group without one fails here."""
    import tests.core.test_config_fields  # noqa: F401  (imports every module of the package)

    root = pathlib.Path(__file__).parents[1]
    sources = [p.read_text() for p in root.rglob("test_*.py")]
    readers = [s for s in sources if re.search(r"unread_fields\(|recorded_reads\(", s)]
    code = [line for s in readers for line in s.splitlines() if not re.match(r"\s*(from|import)\s|\s+\w+,$", line)]
    named = set(re.findall(r"\b[A-Z]\w+\b", "\n".join(code)))
    ours = [c for c in configlib.all_config_classes() if c.__module__.startswith("transformer_jax.")]
    families = [c.__name__ for c in ours if issubclass(c, Variant) and "VARIANTS" in vars(c)]
    groups = [c.__name__ for c in ours if not issubclass(c, Variant) and dataclasses.is_dataclass(c)]
    assert len(families) >= 15 and len(groups) >= 20, (families, groups)
    assert [n for n in families + groups if n not in named and n not in _READ_WHOLE] == []
