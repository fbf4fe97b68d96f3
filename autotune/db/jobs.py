"""Job queries: create, read, list, state transitions, progress, and the leases of owners.

A job being run has an ``owner`` (the process, "host:pid:token") and a lease that the owner
renews; another process claims it once the lease has expired, or at once when the owner was
a process of this host that no longer exists. Claims lock the job row (PostgreSQL: ``FOR
UPDATE SKIP LOCKED``; SQLite: the write transaction's lock), so one process wins each job.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping, Optional, Sequence, cast

from sqlalchemy import ColumnElement, CursorResult, Select, func, or_, select, update
from sqlalchemy.orm import Session

from autotune.db.lease import JobEnded, LeaseLost, is_dead_local
from autotune.db.schema import JOB_STATES, TERMINAL_STATES, JobRow, TargetRow, WorkloadRow, utcnow
from autotune.db.values import JobRecord, job_record

# States of a job that is still to run (a claimed job waiting for a device is 'queued').
ACTIVE_STATES = ("queued", "running")


def _check_state(state: str) -> None:
    if state not in JOB_STATES:
        raise ValueError(f"job state must be one of {', '.join(JOB_STATES)}; got {state!r}")


def job_select() -> Select:
    """Jobs with their workload and target keys (what `job_records` reads)."""
    return (select(JobRow, WorkloadRow.key, TargetRow.key)
            .join(WorkloadRow, JobRow.workload_id == WorkloadRow.id)
            .join(TargetRow, JobRow.target_id == TargetRow.id))


def job_records(session: Session, stmt: Select) -> list[JobRecord]:
    """The jobs a `job_select` statement finds."""
    return [job_record(row, wkey, tkey) for row, wkey, tkey in session.execute(stmt)]


def as_utc(now: Optional[datetime]) -> datetime:
    """``now`` in UTC (naive: taken as UTC), or the current time.

    SQLite stores times as text without a zone: comparisons are right only between UTC times.
    """
    if now is None:
        return utcnow()
    return now.replace(tzinfo=timezone.utc) if now.tzinfo is None else now.astimezone(timezone.utc)


def create_job(session: Session, *, workload_id: int, target_id: int, tuner: str, trials: int,
               options: Mapping[str, Any], owner: Optional[str] = None,
               lease_s: Optional[float] = None, model_run_id: Optional[int] = None) -> int:
    """Insert a job, queued, or running and claimed by ``owner`` for ``lease_s``; its id.
    ``model_run_id``: the model run whose task it tunes (see `autotune.db.model_runs`)."""
    if trials < 0:
        raise ValueError(f"trials must be >= 0; got {trials}")
    now = utcnow()
    row = JobRow(workload_id=workload_id, target_id=target_id, tuner=tuner, trials=trials,
                 state="queued", options=dict(options), trials_done=0,
                 created_at=now, updated_at=now, model_run_id=model_run_id)
    if owner is not None:
        if lease_s is None:
            raise ValueError("a job created with an owner needs lease_s")
        _take(row, owner, lease_s, now)
    session.add(row)
    session.flush()
    return row.id


def get_job(session: Session, *, job_id: int) -> Optional[JobRecord]:
    """The job with ``job_id``, or None."""
    found = job_records(session, job_select().where(JobRow.id == job_id))
    return found[0] if found else None


def list_jobs(session: Session, *, state: Optional[str] = None, offset: int = 0,
              limit: int = 50) -> tuple[list[JobRecord], int]:
    """One page of jobs, newest first, and the total matching count."""
    where = []
    if state is not None:
        _check_state(state)
        where.append(JobRow.state == state)
    total = session.scalar(select(func.count()).select_from(JobRow).where(*where)) or 0
    stmt = (job_select().where(*where).order_by(JobRow.id.desc())
            .offset(max(offset, 0)).limit(max(limit, 0)))
    return job_records(session, stmt), int(total)


def jobs_in_state(session: Session, *, states: Iterable[str]) -> list[JobRecord]:
    """Jobs in any of ``states``, oldest first."""
    wanted = list(states)
    for state in wanted:
        _check_state(state)
    return job_records(session, job_select().where(JobRow.state.in_(wanted)).order_by(JobRow.id))


def set_job_state(session: Session, *, job_id: int, state: str, error: Optional[str] = None,
                  from_states: Optional[Iterable[str]] = None) -> bool:
    """Move a job to ``state`` (only from ``from_states`` when given); False when it did not apply.

    Running stamps ``started_at`` once; terminal states stamp ``finished_at``; leaving a
    terminal state clears it.
    """
    _check_state(state)
    row = _locked(session, job_id)
    if row is None:
        return False
    if from_states is not None and row.state not in set(from_states):
        return False
    set_state(row, state, error, utcnow())
    session.flush()
    return True


def check_held(session: Session, lease: Optional[tuple[int, str]]) -> None:
    """With ``lease`` = (job id, owner): raise `LeaseLost` unless that owner holds the job,
    and `JobEnded` once the job has ended (a cancel: nothing is written after it).

    Called inside a write transaction, with the row locked, so that no claim or cancel can
    slip in between the check and the write.
    """
    if lease is None:
        return
    job_id, owner = lease
    row = _locked(session, job_id)
    if row is None or row.owner != owner:
        holder = "nobody" if row is None or row.owner is None else row.owner
        raise LeaseLost(f"job {job_id} is held by {holder} now, not by {owner}")
    if row.state in TERMINAL_STATES:
        raise JobEnded(f"job {job_id} is {row.state}: nothing more is written for it")


def _locked(session: Session, job_id: int) -> Optional[JobRow]:
    # Row lock on PostgreSQL so that a concurrent cancel and finish cannot interleave.
    stmt = select(JobRow).where(JobRow.id == job_id).with_for_update()
    return session.execute(stmt).scalar_one_or_none()


def set_state(row: JobRow, state: str, error: Optional[str], now: datetime) -> None:
    """Set ``state``: running stamps ``started_at`` once, terminal states ``finished_at``."""
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


def _take(row: JobRow, owner: str, lease_s: float, now: datetime) -> None:
    """Make ``owner`` run the job: running, leased until ``now + lease_s``, not waiting."""
    set_state(row, "running", None, now)
    row.owner, row.waiting = owner, None
    row.lease_expires_at = now + timedelta(seconds=lease_s)


def _dead_local_owners(session: Session) -> list[str]:
    """Owners of jobs that were processes of this host and no longer exist."""
    # Few distinct owners hold jobs at any time (ix_jobs_owner), whatever the number of jobs.
    stmt = select(JobRow.owner).where(JobRow.owner.is_not(None)).distinct()
    return [owner for owner in session.scalars(stmt) if owner and is_dead_local(owner)]


def _gone(now: datetime, dead: Sequence[str]) -> ColumnElement[bool]:
    """Rows whose owner can no longer act: its lease expired (or never existed), or it died."""
    stale = [JobRow.lease_expires_at.is_(None), JobRow.lease_expires_at < now]
    if dead:
        stale.append(JobRow.owner.in_(dead))
    return or_(*stale)


def claim_job(session: Session, *, owner: str, lease_s: float, now: datetime) -> Optional[int]:
    """Take the oldest claimable job for ``owner`` (running, leased); its id, or None.

    Claimable: queued or running with no owner, an expired lease, or a dead local owner;
    never a model run's task job.
    Ended jobs whose owner is gone are released on the way, so that they read as finished.
    """
    dead = _dead_local_owners(session)
    ended = (select(JobRow).where(JobRow.owner.is_not(None), JobRow.state.in_(TERMINAL_STATES),
                                  _gone(now, dead))
             .with_for_update(skip_locked=True))
    for stale in session.scalars(ended):
        clear_owner(stale, now)
    # A model run's task jobs are resumed by running the model run again, which shares
    # the budget among them; one taken alone would spend the whole budget on one task.
    stmt = (select(JobRow)
            .where(JobRow.state.in_(ACTIVE_STATES), or_(JobRow.owner.is_(None), _gone(now, dead)),
                   JobRow.model_run_id.is_(None))
            .order_by(JobRow.id).limit(1)
            .with_for_update(skip_locked=True))  # other claimers skip the row we hold
    row = session.execute(stmt).scalar_one_or_none()
    if row is not None:
        _take(row, owner, lease_s, now)
    session.flush()
    return None if row is None else row.id


def renew_leases(session: Session, *, owner: str, job_ids: Sequence[int], lease_s: float,
                 now: datetime) -> None:
    """Extend the leases of the jobs among ``job_ids`` that ``owner`` still holds."""
    stmt = (update(JobRow).where(JobRow.id.in_(job_ids), JobRow.owner == owner)
            .values(lease_expires_at=now + timedelta(seconds=lease_s))
            .execution_options(synchronize_session=False))
    session.execute(stmt)


def jobs_by_id(session: Session, *, job_ids: Sequence[int]) -> dict[int, JobRecord]:
    """The jobs among ``job_ids`` that exist, by id."""
    return {job.id: job for job in job_records(session, job_select().where(JobRow.id.in_(job_ids)))}


def holders(session: Session, *, job_ids: Sequence[int]) -> dict[int, tuple[str, Optional[str]]]:
    """(state, owner) of the jobs among ``job_ids`` that exist: one narrow read."""
    stmt = select(JobRow.id, JobRow.state, JobRow.owner).where(JobRow.id.in_(job_ids))
    return {job_id: (state, owner) for job_id, state, owner in session.execute(stmt)}


def clear_owner(row: JobRow, now: datetime) -> None:
    """Release the row: no owner, lease or waiting reason."""
    row.owner = row.lease_expires_at = row.waiting = None
    row.updated_at = now


def release_job(session: Session, *, job_id: int, owner: str, state: Optional[str] = None,
                error: Optional[str] = None) -> bool:
    """Clear the job's owner, lease and waiting reason if ``owner`` holds it; False otherwise.

    With ``state``, also move it there, unless it has already ended (a cancelled job stays so).
    """
    if state is not None:
        _check_state(state)
    row = _locked(session, job_id)
    if row is None or row.owner != owner:
        return False
    now = utcnow()
    if state is not None and row.state not in TERMINAL_STATES:
        set_state(row, state, error, now)
    clear_owner(row, now)
    session.flush()
    return True


def set_job_waiting(session: Session, *, job_id: int, owner: str, reason: Optional[str]) -> bool:
    """Mark a job ``owner`` holds as waiting (queued, with ``reason``) or, with None, running
    again; an ended job keeps its state. False when ``owner`` does not hold it."""
    row = _locked(session, job_id)
    if row is None or row.owner != owner:
        return False
    if row.state in ACTIVE_STATES:
        set_state(row, "queued" if reason is not None else "running", None, utcnow())
        row.waiting = reason
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


def set_model_scores(session: Session, *, job_id: int, batch: int, trials: int,
                     scores: Mapping[str, float]) -> bool:
    """Replace the job's current-model scores (see `JobRow.model_scores`); False when the
    job does not exist. One UPDATE, no read of the old value."""
    value = {"batch": int(batch), "trials": int(trials),
             "scores": {str(k): float(v) for k, v in scores.items()}}
    stmt = (update(JobRow).where(JobRow.id == job_id).values(model_scores=value)
            .execution_options(synchronize_session=False))
    done = session.execute(stmt)
    return bool(cast("CursorResult[Any]", done).rowcount)  # an UPDATE's result is a cursor


def model_scores(session: Session, *, job_id: int) -> Optional[dict[str, Any]]:
    """The job's current-model scores as `set_model_scores` stored them, or None."""
    value = session.scalar(select(JobRow.model_scores).where(JobRow.id == job_id))
    return value if isinstance(value, dict) else None
