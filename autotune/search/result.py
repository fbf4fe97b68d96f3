"""What the tuning loop reports: per-batch `Progress` and the final `TuneResult`."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping, Optional

from autotune.search.explain import short
from autotune.search.retime import Retimed

if TYPE_CHECKING:
    from autotune.measure.result import MeasureResult
    from autotune.space import Config

# Why a loop ended.
STOP_REASONS = ("budget", "early_stopping", "exhausted", "callback")


@dataclass(frozen=True)
class Progress:
    """Passed to ``on_batch`` callbacks after each batch is measured and recorded.

    ``trials_done`` counts toward ``budget`` (a resumed job's earlier trials included);
    ``errors`` counts failed measurements in this call; best values (the one ranking of
    `autotune.db.trials.top`, see docs/architecture.md) are 0/None until one is valid.
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
class TuneResult:
    """The outcome of a tuning run.

    best_*: the best valid config known for the workload and target (earlier runs recorded in
    the database included), by the one ranking of `autotune.db.trials.top`: the latest
    accepted re-timing window's fastest by its re-timed figure, else the fastest first
    measurement. ``trials``: measurements made by this call. ``history``: (trial number,
    GFLOP/s or 0 when failed, fastest first measurement so far in GFLOP/s) per trial.
    ``retimed``: the members of the re-timing window (empty when none ran).
    ``best_retimed``: whether ``best_cost`` is a window's re-timed figure.
    ``default_index``/``default_cost``: the template's default config and its figure on the
    best's footing (re-timed in the window beside it, else its first measurement; None when
    it has no valid record). `autotune.search.explain` words all of it for people.
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
    default_index: Optional[int] = None
    default_cost: Optional[float] = None
    best_retimed: bool = False  # whether best_cost is a re-timed figure, not a first one

    @property
    def ok(self) -> bool:
        """Whether a valid config was found."""
        return self.best_config is not None

    @property
    def default_gflops(self) -> Optional[float]:
        """The default config's GFLOP/s on the best's footing (None: no valid record)."""
        if self.default_cost is None or not self.ok or self.best_gflops <= 0:
            return None
        return self.best_gflops * self.best_cost / self.default_cost

    @property
    def beat_default(self) -> Optional[bool]:
        """Whether a tuned config ranks above the default (None: the default has no valid
        record, or nothing is valid)."""
        if self.best_config is None or self.default_cost is None:
            return None
        return int(self.best_config.index) != self.default_index

    @property
    def speedup(self) -> Optional[float]:
        """How many times faster the best runs than the default (1.0 when it is the
        default; None when either is unknown)."""
        if self.default_cost is None or not self.ok or self.best_cost <= 0:
            return None
        return self.default_cost / self.best_cost

    def __repr__(self) -> str:
        return f"TuneResult({short(self)})"
