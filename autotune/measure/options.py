"""`MeasureOptions`: how candidates are built, checked and timed (one frozen record)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from autotune.job_options import MEASURE_BOUNDS, MEASURE_FIELDS, MeasureOverrides
from autotune.settings import Settings


def _cpu_count() -> int:
    return min(os.cpu_count() or 1, int(MEASURE_BOUNDS["n_build_workers"].maximum))


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
        # The one table of bounds, shared with the settings and every job's options.
        for name, bound in MEASURE_BOUNDS.items():
            object.__setattr__(self, name, bound.check(f"MeasureOptions.{name}",
                                                       getattr(self, name)))

    @classmethod
    def from_settings(cls, settings: Settings,
                      overrides: Optional[MeasureOverrides] = None) -> "MeasureOptions":
        """The options that ``settings`` name (``MEASURE_FIELDS``), then a job's
        ``overrides`` of them."""
        values = {name: getattr(settings, name) for name in MEASURE_FIELDS}
        return cls(**{**values, **(overrides.given() if overrides is not None else {})})

    def overrides(self) -> MeasureOverrides:
        """The job-level options (`MEASURE_FIELDS`) of these, as a job row keeps them."""
        return MeasureOverrides(**{name: getattr(self, name) for name in MEASURE_FIELDS})
