"""What the search needs of a store of records, declared and typed: the tuning loop and the
cost model's transfer read and write records through `SearchStore`, and report a job's
progress through `ProgressSink`. `autotune.db.Database` is both (the database sits above
the search); the optional parts have defaults, so a store that keeps no re-timing windows,
no progress or no model scores just inherits them."""
from __future__ import annotations

from typing import Mapping, Optional, Protocol, Sequence

from autotune.measure.result import MeasureResult
from autotune.ops import Workload
from autotune.records import TrialRecord
from autotune.search.retime import Retimed
from autotune.space import Config
from autotune.target import Target


class JobStopped(RuntimeError):
    """The store refused a job's write because the job has ended (cancelled): nothing more
    is written for it, and its search stops as if a callback had stopped it."""


class SearchStore(Protocol):
    """Trials of a workload on a target, written by the loop and read back by it, its tuners
    and the cost model's transfer."""

    def trials_for(self, workload: Workload, target: Target) -> list[TrialRecord]: ...

    def add_trials(self, workload: Workload, target: Target, job_id: Optional[int],
                   items: Sequence[tuple[Config, MeasureResult]], flops: int) -> int: ...

    def history(self, op: str, target_kind: str,
                exclude_workload_key: Optional[str] = None) -> dict[str, list[TrialRecord]]:
        """Records of other workloads of ``op`` on ``target_kind`` targets (default: none)."""
        return {}

    def record_retiming(self, workload: Workload, target: Target, members: Sequence[Retimed],
                        *, accepted: bool) -> int:
        """Keep a re-timing window's outcome (default: kept nowhere)."""
        return 0

    def best(self, workload: Workload, target: Target) -> Optional[TrialRecord]:
        """The best record by the store's one ranking (default: none known)."""
        return None


class ProgressSink(Protocol):
    """Where a job's progress and its cost model's scores go (defaults: nowhere)."""

    def update_job_progress(self, job_id: int, *, trials_done: int,
                            best_gflops: Optional[float]) -> bool:
        return True

    def set_job_model_scores(self, job_id: int, *, batch: int, trials: int,
                             scores: Mapping[str, float]) -> bool:
        return True


class TrialStore(SearchStore, ProgressSink, Protocol):
    """A store of records that also follows a job (what `tune_loop` takes as ``db``)."""
