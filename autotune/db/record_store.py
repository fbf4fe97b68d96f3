"""`RecordStore`: the tuning records (trials, bests, a job's trials, import and export), as
narrow as the search needs them (`autotune.search.store.RecordStore`)."""
from __future__ import annotations

from typing import IO, TYPE_CHECKING, Iterable, Optional, Sequence

from autotune.db import export_import, jobs, trials
from autotune.db.store import Store
from autotune.db.values import (
    ConfigLike,
    KeyOrObject,
    RetimedLike,
    TargetLike,
    TrialRecord,
    WorkloadLike,
    key_of,
)
from autotune.records import files as jsonl_files

if TYPE_CHECKING:
    from autotune.measure.result import MeasureResult


class RecordStore(Store):
    """Trials of workloads on targets: written once per config, ranked for the best."""

    def add_trials(self, workload: WorkloadLike, target: TargetLike, job_id: Optional[int],
                   items: Sequence[tuple[ConfigLike, "MeasureResult"]], flops: int, *,
                   lease: Optional[tuple[int, str]] = None) -> int:
        """Record measurements in one transaction, skipping configs already recorded; returns
        count. With ``lease`` (job id, owner), only while that owner holds the job (else
        `LeaseLost`, nothing written)."""
        with self.session(write=True) as s:
            jobs.check_held(s, lease)
            ids = self._ids(s, workload, target)
            rows = [trials.trial_row(workload_id=ids[0], target_id=ids[1], job_id=job_id,
                                     config=config, result=result, flops=flops)
                    for config, result in items]
            inserted = trials.insert_rows(s, rows=rows)
        self._remember(workload, target, ids)
        return inserted

    def record_retiming(self, workload: KeyOrObject, target: KeyOrObject,
                        members: Sequence[RetimedLike], *, accepted: bool,
                        lease: Optional[tuple[int, str]] = None) -> int:
        """Write a re-timing window's outcome (`trials.record_retiming`): an ``accepted``
        window's figures become the ones `best` ranks by; a disqualified member stops being
        valid. Returns the records touched. ``lease`` as in `add_trials`."""
        with self.session(write=True) as s:
            jobs.check_held(s, lease)
            return trials.record_retiming(s, workload_key=key_of(workload),
                                          target_key=key_of(target), members=members,
                                          accepted=accepted)

    def best(self, workload: KeyOrObject, target: KeyOrObject) -> Optional[TrialRecord]:
        """The best valid record (the first of `top`), or None; its figure is
        ``ranked_cost``. Failed trials are never best."""
        found = self.top(workload, target, 1)
        return found[0] if found else None

    def top(self, workload: KeyOrObject, target: KeyOrObject, k: int) -> list[TrialRecord]:
        """The ``k`` best valid records, best first (`trials.top` states the ranking)."""
        with self.session() as s:
            return trials.top(s, workload_key=key_of(workload), target_key=key_of(target), k=k)

    def config_record(self, workload: KeyOrObject, target: KeyOrObject,
                      index: int) -> Optional[TrialRecord]:
        """The record of the config at ``index`` of the workload's space, or None."""
        with self.session() as s:
            return trials.config_record(s, workload_key=key_of(workload),
                                        target_key=key_of(target), index=index)

    def measured_indices(self, workload: KeyOrObject, target: KeyOrObject) -> set[int]:
        """Space indices already measured for a workload on a target."""
        with self.session() as s:
            return trials.measured_indices(s, workload_key=key_of(workload),
                                           target_key=key_of(target))

    def trials_for(self, workload: KeyOrObject, target: KeyOrObject) -> list[TrialRecord]:
        """Every record of a workload on a target, in measurement order."""
        with self.session() as s:
            return trials.trials_for(s, workload_key=key_of(workload), target_key=key_of(target))

    def history(self, op: str, target_kind: str,
                exclude_workload_key: Optional[str] = None) -> dict[str, list[TrialRecord]]:
        """Records of other workloads of ``op`` on ``target_kind`` targets (transfer learning)."""
        with self.session() as s:
            return trials.history(s, op=op, target_kind=target_kind,
                                  exclude_workload_key=exclude_workload_key)

    def job_trials(self, job_id: int, *, offset: int = 0, limit: int = 100, sort: str = "id",
                   error: Optional[str] = None) -> tuple[list[TrialRecord], int]:
        """A page of a job's records (sort: [-]id, [-]gflops, [-]cost) and the total count."""
        with self.session() as s:
            return trials.job_trials(s, job_id=job_id, offset=offset, limit=limit, sort=sort,
                                     error=error)

    def job_trial_count(self, job_id: int) -> int:
        """How many records a job has written."""
        with self.session() as s:
            return trials.job_trial_count(s, job_id=job_id)

    def job_trials_since(self, job_id: int, after_id: int,
                         limit: Optional[int] = None) -> list[TrialRecord]:
        """A job's records newer than row ``after_id``, oldest first."""
        with self.session() as s:
            return trials.job_trials_since(s, job_id=job_id, after_id=after_id, limit=limit)


    # -- export / import ----------------------------------------------------------------

    def export_jsonl(self, fp: IO[str], *, workload: Optional[KeyOrObject] = None,
                     target: Optional[KeyOrObject] = None) -> int:
        """Write records as JSON lines to ``fp``; returns how many."""
        with self.session() as s:
            return export_import.export_jsonl(
                s, fp, workload_key=None if workload is None else key_of(workload),
                target_key=None if target is None else key_of(target))

    def import_jsonl(self, fp: Iterable[str]) -> int:
        """Insert JSON-line records from ``fp`` in one transaction, skipping duplicates."""
        with self.session(write=True) as s:
            return export_import.import_jsonl(s, fp)

    def export_jsonl_path(self, path: jsonl_files.PathLike, *,
                          workload: Optional[KeyOrObject] = None,
                          target: Optional[KeyOrObject] = None) -> int:
        """``export_jsonl`` to a file; gzip-compressed when the name ends in ``.gz``."""
        with jsonl_files.write_text(path) as fp:
            return self.export_jsonl(fp, workload=workload, target=target)

    def import_jsonl_path(self, path: jsonl_files.PathLike) -> int:
        """``import_jsonl`` from a file, plain or gzip-compressed."""
        with jsonl_files.read_lines(path) as fp:
            return self.import_jsonl(fp)
