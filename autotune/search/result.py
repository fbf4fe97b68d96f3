"""What the tuning loop reports: per-batch `Progress` and the final `TuneResult`."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping, Optional

if TYPE_CHECKING:
    from autotune.measure.result import MeasureResult
    from autotune.space import Config

# Why a loop ended.
STOP_REASONS = ("budget", "early_stopping", "exhausted", "callback")


@dataclass(frozen=True)
class Progress:
    """Passed to ``on_batch`` callbacks after each batch is measured and recorded.

    ``trials_done`` counts toward ``budget`` (a resumed job's earlier trials included);
    ``errors`` counts failed measurements in this call; best values are 0/None until one is valid.
    """

    trials_done: int
    budget: int
    best_gflops: float
    best_config: Optional["Config"]
    errors: int
    last_batch: tuple[tuple["Config", "MeasureResult"], ...]
    job_id: Optional[int] = None
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class Retimed:
    """One top candidate timed again at the end (costs in seconds; None: the re-run failed)."""

    config_index: int
    first_cost: float
    retimed_cost: Optional[float]
    cost: float  # median of the first and the re-run's repeats together: what ranks it now
    error: str = "none"


@dataclass(frozen=True)
class TuneResult:
    """The outcome of a tuning run.

    best_*: the best valid config known for the workload and target (earlier runs recorded in
    the database included), ranked after re-timing. ``trials``: measurements made by this call.
    ``history``: (trial number, GFLOP/s or 0 when failed, best GFLOP/s so far) per trial.
    """

    best_config: Optional["Config"]
    best_cost: float
    best_gflops: float
    trials: int
    history: tuple[tuple[int, float, float], ...]
    errors: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    stopped: str = "budget"
    job_id: Optional[int] = None
    retimed: tuple[Retimed, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether a valid config was found."""
        return self.best_config is not None
