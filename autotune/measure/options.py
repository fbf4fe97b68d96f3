"""`MeasureOptions`: how candidates are built, checked and timed (one frozen record)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from autotune.settings import MEASURE_FIELDS, Settings


def _cpu_count() -> int:
    return os.cpu_count() or 1


@dataclass(frozen=True)
class MeasureOptions:
    """Timing protocol, timeouts and correctness tolerances for a measurement batch.

    ``number`` is only the first guess of calls per repeat: it grows until one repeat
    lasts ``min_repeat_ms``. ``run_timeout`` bounds one candidate's whole protocol.
    """

    number: int = 1
    repeat: int = 5
    min_repeat_ms: float = 20.0
    warmup: int = 1
    flush_cache: bool = False  # CPU only: overwrite a buffer larger than the LLC between repeats
    build_timeout: float = 10.0
    run_timeout: float = 10.0
    n_build_workers: int = field(default_factory=_cpu_count)
    check_correctness: bool = True
    # a half dtype's own tolerances apply where larger (`correctness.tolerance`)
    rtol: float = 1e-4
    atol: float = 1e-4
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("number", "repeat", "n_build_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"MeasureOptions.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("warmup", "min_repeat_ms", "rtol", "atol"):
            if getattr(self, name) < 0:
                raise ValueError(f"MeasureOptions.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("build_timeout", "run_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MeasureOptions.{name} must be > 0, got {getattr(self, name)}")

    @classmethod
    def from_settings(cls, settings: Settings, **overrides: Any) -> "MeasureOptions":
        """The options that ``settings`` name (``MEASURE_FIELDS``), then ``overrides``."""
        values = {name: getattr(settings, name) for name in MEASURE_FIELDS}
        return cls(**{**values, **overrides})
