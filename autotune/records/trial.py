"""`TrialRecord`: one measured config, as the database, replays and exports all know it.

It sits below both the measurement and the database layers, with its JSON codec
(`autotune.records.codec`), so that each can read recorded trials without the other.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class TrialRecord:
    """One measured config of a workload on a target (cost and gflops None when it failed)."""

    workload_key: str
    target_key: str
    config: dict[str, Any]
    config_index: int
    costs: tuple[float, ...]
    cost: Optional[float]
    gflops: Optional[float]
    error: str
    error_msg: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    timestamp: float = 0.0
    job_id: Optional[int] = None
    extra: dict[str, Any] = field(default_factory=dict)
    id: Optional[int] = None
    worker: Optional[str] = None  # who measured it (a worker id), when known
    # Its figure in the latest accepted re-timing window of its workload and target, when it
    # was one of that window's members (``cost`` stays the first measurement's).
    retimed_cost: Optional[float] = None

    @property
    def ok(self) -> bool:
        return self.error == "none" and self.cost is not None

    @property
    def ranked_cost(self) -> Optional[float]:
        """The figure it is ranked by (`autotune.db.trials.top`): the re-timed one when it
        has one, else its first measurement's."""
        return self.retimed_cost if self.retimed_cost is not None else self.cost

    @property
    def ranked_gflops(self) -> Optional[float]:
        """GFLOP/s at `ranked_cost` (None when failed)."""
        if self.gflops is None or not self.cost or not self.ranked_cost:
            return None
        return self.gflops * self.cost / self.ranked_cost  # gflops = flops / cost / 1e9
