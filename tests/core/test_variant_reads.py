"""The read recorder of `tests.variant_reads` can fail: it reports a field nobody reads, and does not
count validation, equality, hashing, ``replace``, ``to_dict``, the unread-settings check or ``--set``
parsing as reads."""

from __future__ import annotations

import dataclasses

from tests.variant_reads import unread_fields
from transformer_jax.core import configlib, unread
from transformer_jax.core.configlib import setting
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
