"""Model runs: a model's tasks tuned under one budget (`autotune.tune_model`).

A run is found again by its fingerprint (the task set) and target, so running the same
model again continues it. Each task's trials are a job linked to the run; the service's
job manager never claims those (see `jobs.claim_job`).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping, Optional, Sequence

from sqlalchemy import case, func, select

from autotune.db import jobs
from autotune.db.entities import ensure_target, ensure_workload
from autotune.db.lease import is_dead_local
from autotune.db.schema import JobRow, ModelRunRow, TargetRow, TrialRow, WorkloadRow, utcnow
from autotune.db.store import Store
from autotune.db.trials import TRANSIENT
from autotune.db.values import JobRecord, TargetLike, WorkloadLike, utc

RUN_STATES = ("running", "done", "failed", "cancelled")
# A run whose owner has written nothing for this long is taken as abandoned (a round, one
# batch of one task, takes seconds to minutes).
STALE_AFTER_S = 600.0


class RunBusy(RuntimeError):
    """Another live process is tuning this model run."""


@dataclass(frozen=True)
class ModelRunRecord:
    """A model run as stored: budget, spending, tasks and its latency estimate over time."""

    id: int
    name: str
    fingerprint: str
    target_key: str
    budget: int
    trials_done: int
    state: str
    tasks: tuple[Mapping[str, Any], ...]
    unsupported: tuple[Mapping[str, Any], ...]
    history: tuple[tuple[float, int, Optional[float]], ...]
    estimated_latency_s: Optional[float]
    owner: Optional[str]
    error: Optional[str]
    created_at: datetime
    updated_at: datetime
    finished_at: Optional[datetime]


@dataclass(frozen=True)
class TaskTrials:
    """What the database holds for one task's workload on the run's target."""

    trials: int  # records that count against a budget (transient ones do not)
    best_cost: Optional[float]


def _record(row: ModelRunRow, target_key: str) -> ModelRunRecord:
    return ModelRunRecord(
        id=row.id, name=row.name, fingerprint=row.fingerprint, target_key=target_key,
        budget=row.budget, trials_done=row.trials_done, state=row.state,
        tasks=tuple(row.tasks or ()), unsupported=tuple(row.unsupported or ()),
        history=tuple((float(t), int(n), None if c is None else float(c))
                      for t, n, c in row.history or ()),
        estimated_latency_s=row.estimated_latency_s, owner=row.owner, error=row.error,
        created_at=utc(row.created_at), updated_at=utc(row.updated_at),  # type: ignore[arg-type]
        finished_at=utc(row.finished_at))


def _select() -> Any:
    return select(ModelRunRow, TargetRow.key).join(TargetRow, ModelRunRow.target_id == TargetRow.id)


class ModelRunStore(Store):
    """Model runs, their task jobs and what the database holds for their tasks (a part of
    the job store)."""

    def create_run(self, *, name: str, fingerprint: str, target: TargetLike, budget: int,
                   tasks: Sequence[Mapping[str, Any]], unsupported: Sequence[Mapping[str, Any]],
                   owner: str) -> ModelRunRecord:
        """A new run, running under ``owner``."""
        if budget < 0:
            raise ValueError(f"budget must be >= 0; got {budget}")
        now = utcnow()
        with self.session(write=True) as s:
            tid = ensure_target(s, key=target.key, kind=target.kind)
            row = ModelRunRow(name=name[:200], fingerprint=fingerprint, target_id=tid,
                              budget=budget, trials_done=0, state="running", tasks=list(tasks),
                              unsupported=list(unsupported), history=[], owner=owner,
                              created_at=now, updated_at=now)
            s.add(row)
            s.flush()
            return _record(row, target.key)

    def get_run(self, run_id: int) -> Optional[ModelRunRecord]:
        with self.session() as s:
            found = s.execute(_select().where(ModelRunRow.id == run_id)).first()
            return None if found is None else _record(*found)

    def list_runs(self, *, offset: int = 0, limit: int = 50
                  ) -> tuple[list[ModelRunRecord], int]:
        """One page of runs, newest first, and the total count."""
        with self.session() as s:
            total = s.scalar(select(func.count()).select_from(ModelRunRow)) or 0
            rows = s.execute(_select().order_by(ModelRunRow.id.desc())
                             .offset(max(offset, 0)).limit(max(limit, 0)))
            return [_record(*r) for r in rows], int(total)

    def latest_run(self, fingerprint: str, target_key: str) -> Optional[ModelRunRecord]:
        """The newest run of this task set on this target, or None."""
        with self.session() as s:
            found = s.execute(_select().where(ModelRunRow.fingerprint == fingerprint,
                                              TargetRow.key == target_key)
                              .order_by(ModelRunRow.id.desc()).limit(1)).first()
            return None if found is None else _record(*found)

    def take_run(self, run_id: int, *, owner: str, budget: int,
                 stale_after_s: float = STALE_AFTER_S) -> ModelRunRecord:
        """Continue a run under ``owner`` with ``budget``; `RunBusy` while another process that
        is alive and recently active holds it. Its task jobs left active by a dead owner end
        as cancelled."""
        now = utcnow()
        with self.session(write=True) as s:
            row = s.execute(select(ModelRunRow).where(ModelRunRow.id == run_id)
                            .with_for_update()).scalar_one()
            updated = utc(row.updated_at)
            fresh = updated is not None and updated > now - timedelta(seconds=stale_after_s)
            if row.state == "running" and row.owner and row.owner != owner and \
                    not is_dead_local(row.owner) and fresh:
                raise RunBusy(f"model run {run_id} is being tuned by {row.owner}")
            row.owner, row.state, row.budget, row.error = owner, "running", budget, None
            row.finished_at, row.updated_at = None, now
            for job in s.scalars(select(JobRow).where(JobRow.model_run_id == run_id,
                                                           JobRow.state.in_(jobs.ACTIVE_STATES))):
                jobs.set_state(job, "cancelled", "interrupted; the model run was resumed", now)
                jobs.clear_owner(job, now)
            s.flush()
            return _record(row, s.get(TargetRow, row.target_id).key)  # type: ignore[union-attr]

    def update_run(self, run_id: int, *, trials_done: int,
                   estimated_latency_s: Optional[float], elapsed_s: float) -> None:
        """Record a round: spending, the latency estimate, and a point of its history."""
        with self.session(write=True) as s:
            row = s.get(ModelRunRow, run_id)
            if row is None:
                return
            row.trials_done, row.estimated_latency_s = trials_done, estimated_latency_s
            # a new list: the JSON column notices assignment, not mutation
            row.history = [*(row.history or ()), [round(elapsed_s, 3), trials_done,
                                                  estimated_latency_s]]
            row.updated_at = utcnow()

    def finish_run(self, run_id: int, *, state: str, error: Optional[str] = None) -> None:
        """End a run in ``state`` and release it."""
        if state not in RUN_STATES:
            raise ValueError(f"model run state must be one of {', '.join(RUN_STATES)}; "
                             f"got {state!r}")
        now = utcnow()
        with self.session(write=True) as s:
            row = s.get(ModelRunRow, run_id)
            if row is None:
                return
            row.state, row.error, row.owner = state, error, None
            row.finished_at = row.updated_at = now

    def create_task_job(self, run_id: int, *, workload: WorkloadLike, target: TargetLike,
                        tuner: str, trials: int, options: Mapping[str, Any], owner: str,
                        lease_s: float) -> int:
        """A job for one task of the run, running under ``owner``; its id."""
        with self.session(write=True) as s:
            wid = ensure_workload(s, key=workload.key, op=workload.op)
            tid = ensure_target(s, key=target.key, kind=target.kind)
            return jobs.create_job(s, workload_id=wid, target_id=tid, tuner=tuner, trials=trials,
                                   options=options, owner=owner, lease_s=lease_s,
                                   model_run_id=run_id)

    def run_jobs(self, run_id: int) -> list[JobRecord]:
        """The task jobs of a run, oldest first."""
        with self.session() as s:
            return jobs.job_records(s, jobs.job_select().where(JobRow.model_run_id == run_id)
                             .order_by(JobRow.id))

    def task_trials(self, workload_keys: Sequence[str], target_key: str
                    ) -> dict[str, TaskTrials]:
        """Per workload key: its records on the target and its best valid cost (one query)."""
        if not workload_keys:
            return {}
        valid = case((TrialRow.error == "none", TrialRow.cost), else_=None)
        retimed = case((TrialRow.error == "none", TrialRow.retimed_cost), else_=None)
        # `trials.top`'s ranking: the latest re-timing window's figure where there is one
        best = func.coalesce(func.min(retimed), func.min(valid))
        stmt = (select(WorkloadRow.key, func.count(TrialRow.id), best)
                .join(TrialRow, TrialRow.workload_id == WorkloadRow.id)
                .join(TargetRow, TrialRow.target_id == TargetRow.id)
                .where(WorkloadRow.key.in_(list(workload_keys)), TargetRow.key == target_key,
                       TrialRow.error != TRANSIENT)
                .group_by(WorkloadRow.key))
        with self.session() as s:
            found = {key: TaskTrials(int(n), None if best is None else float(best))
                     for key, n, best in s.execute(stmt)}
        return {key: found.get(key, TaskTrials(0, None)) for key in workload_keys}
