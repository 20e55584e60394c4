"""``BaselineConfig``: settings of the classic LMs (``model.baseline``), used when ``model.kind``
is one of the baseline kinds."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class BaselineConfig:
    """Settings that only the classic language models read."""

    def validate(self, model_cfg) -> None:
        """Checks against the enclosing ModelConfig (raise ConfigError naming model.baseline.*)."""
