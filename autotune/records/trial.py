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

    @property
    def ok(self) -> bool:
        return self.error == "none" and self.cost is not None
