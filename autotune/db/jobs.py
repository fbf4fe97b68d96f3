"""Job queries: create, read, list, state transitions, progress."""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from autotune.db.records import JobRecord, job_record
from autotune.db.schema import JOB_STATES, TERMINAL_STATES, JobRow, TargetRow, WorkloadRow, utcnow


def _check_state(state: str) -> None:
    if state not in JOB_STATES:
        raise ValueError(f"job state must be one of {', '.join(JOB_STATES)}; got {state!r}")


def _records() -> Select[Any]:
    return (select(JobRow, WorkloadRow.key, TargetRow.key)
            .join(WorkloadRow, JobRow.workload_id == WorkloadRow.id)
            .join(TargetRow, JobRow.target_id == TargetRow.id))


def _run(session: Session, stmt: Select[Any]) -> list[JobRecord]:
    return [job_record(row, wkey, tkey) for row, wkey, tkey in session.execute(stmt)]


def create_job(session: Session, *, workload_id: int, target_id: int, tuner: str, trials: int,
               options: Mapping[str, Any]) -> int:
    """Insert a queued job; returns its id."""
    if trials < 0:
        raise ValueError(f"trials must be >= 0; got {trials}")
    now = utcnow()
    row = JobRow(workload_id=workload_id, target_id=target_id, tuner=tuner, trials=trials,
                 state="queued", options=dict(options), trials_done=0,
                 created_at=now, updated_at=now)
    session.add(row)
    session.flush()
    return row.id


def get_job(session: Session, *, job_id: int) -> Optional[JobRecord]:
    """The job with ``job_id``, or None."""
    found = _run(session, _records().where(JobRow.id == job_id))
    return found[0] if found else None


def list_jobs(session: Session, *, state: Optional[str] = None, offset: int = 0,
              limit: int = 50) -> tuple[list[JobRecord], int]:
    """One page of jobs, newest first, and the total matching count."""
    where = []
    if state is not None:
        _check_state(state)
        where.append(JobRow.state == state)
    total = session.scalar(select(func.count()).select_from(JobRow).where(*where)) or 0
    stmt = (_records().where(*where).order_by(JobRow.id.desc())
            .offset(max(offset, 0)).limit(max(limit, 0)))
    return _run(session, stmt), int(total)


def jobs_in_state(session: Session, *, states: Iterable[str]) -> list[JobRecord]:
    """Jobs in any of ``states``, oldest first (what to resume after a restart)."""
    wanted = list(states)
    for state in wanted:
        _check_state(state)
    return _run(session, _records().where(JobRow.state.in_(wanted)).order_by(JobRow.id))


def set_job_state(session: Session, *, job_id: int, state: str, error: Optional[str] = None,
                  from_states: Optional[Iterable[str]] = None) -> bool:
    """Move a job to ``state`` (only from ``from_states`` when given); False when it did not apply.

    Running stamps ``started_at`` once; terminal states stamp ``finished_at``; leaving a
    terminal state clears it.
    """
    _check_state(state)
    # Row lock on PostgreSQL so a concurrent cancel and finish cannot interleave.
    stmt = select(JobRow).where(JobRow.id == job_id).with_for_update()
    row = session.execute(stmt).scalar_one_or_none()
    if row is None:
        return False
    if from_states is not None and row.state not in set(from_states):
        return False
    now = utcnow()
    row.state = state
    if state == "running" and row.started_at is None:
        row.started_at = now
    if state in TERMINAL_STATES:
        row.finished_at = now
    elif row.finished_at is not None:
        row.finished_at = None
    if error is not None:
        row.error = error
    row.updated_at = now
    session.flush()
    return True


def update_job_progress(session: Session, *, job_id: int, trials_done: int,
                        best_gflops: Optional[float]) -> bool:
    """Record a job's progress; False when the job does not exist."""
    row = session.get(JobRow, job_id)
    if row is None:
        return False
    row.trials_done = trials_done
    row.best_gflops = best_gflops
    row.updated_at = utcnow()
    session.flush()
    return True
