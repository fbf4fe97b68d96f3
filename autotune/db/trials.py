"""Trial queries: insert measured configs, best/top records, history, per-job listings.

A config is recorded once per (workload, target), except that a ``transient`` record (the
measuring process was lost: no verdict on the config) gives way to the next measurement.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence

from sqlalchemy import Select, case, delete, func, select, update
from sqlalchemy.orm import Session

from autotune.db.entities import insert_ignore
from autotune.db.schema import TargetRow, TrialRow, WorkloadRow, utcnow
from autotune.db.values import ConfigLike, RetimedLike, TrialRecord, trial_record

if TYPE_CHECKING:
    from autotune.measure.result import MeasureResult

# Sort keys accepted by ``job_trials``; failed trials (NULL cost/gflops) always sort last.
SORTS = ("id", "-id", "gflops", "-gflops", "cost", "-cost")
TRANSIENT = "transient"  # ErrorKind.TRANSIENT's value (the db layer does not import measure)


def _error_name(error: Any) -> str:
    return str(getattr(error, "value", error))


def worker_of(extra: Mapping[str, Any]) -> Optional[str]:
    """The worker id in a result's ``extra["measured_by"]``, or None when it names none."""
    who = extra.get("measured_by")
    worker = who.get("worker") if isinstance(who, Mapping) else None
    # The column holds 200 characters; an id is far shorter, but a bad one must not fail a batch.
    return str(worker)[:200] if worker else None


def trial_row(*, workload_id: int, target_id: int, job_id: Optional[int], config: ConfigLike,
              result: "MeasureResult", flops: int) -> dict[str, Any]:
    """The column values of one measured config (cost/gflops None unless it is valid)."""
    error = _error_name(result.error)
    valid = error == "none" and bool(result.costs)
    cost = float(result.cost) if valid else None
    gflops = flops / cost / 1e9 if cost is not None and cost > 0 else None
    return {
        "workload_id": workload_id,
        "target_id": target_id,
        "job_id": job_id,
        "config_key": str(int(config.index)),
        "config": dict(config.to_dict()),
        "costs": [float(c) for c in result.costs],
        "cost": cost,
        "gflops": gflops,
        "error": error,
        "error_msg": result.error_msg,
        "build_s": float(result.build_s),
        "run_s": float(result.run_s),
        "timestamp": float(result.timestamp),
        "extra": dict(result.extra),
        "created_at": utcnow(),
        "worker": worker_of(result.extra),
    }


def insert_rows(session: Session, *, rows: Sequence[Mapping[str, Any]]) -> int:
    """Insert trial rows in one statement, skipping configs already recorded (a transient
    record is replaced: deleted, then its config inserted anew); returns count."""
    if not rows:
        return 0
    _drop_transient(session, rows)
    stmt = insert_ignore(session, TrialRow.__table__,  # type: ignore[arg-type]
                         ["workload_id", "target_id", "config_key"])
    # RETURNING counts what was inserted on every dialect (executemany rowcounts do not).
    result = session.execute(stmt.returning(TrialRow.id), list(rows))
    return len(result.all())


def _drop_transient(session: Session, rows: Sequence[Mapping[str, Any]]) -> None:
    """Delete the transient records of the configs in ``rows`` (in the caller's transaction:
    a concurrent writer of the same config then finds the new row and skips its own)."""
    keys: dict[tuple[int, int], list[str]] = {}
    for row in rows:
        keys.setdefault((row["workload_id"], row["target_id"]), []).append(row["config_key"])
    for (workload_id, target_id), config_keys in keys.items():
        session.execute(delete(TrialRow).where(
            TrialRow.workload_id == workload_id, TrialRow.target_id == target_id,
            TrialRow.config_key.in_(config_keys), TrialRow.error == TRANSIENT))


def _records() -> Select:
    return (select(TrialRow, WorkloadRow.key, TargetRow.key)
            .join(WorkloadRow, TrialRow.workload_id == WorkloadRow.id)
            .join(TargetRow, TrialRow.target_id == TargetRow.id))


def _of(stmt: Select, workload_key: str, target_key: str) -> Select:
    return stmt.where(WorkloadRow.key == workload_key, TargetRow.key == target_key)


def _run(session: Session, stmt: Select) -> list[TrialRecord]:
    return [trial_record(row, wkey, tkey) for row, wkey, tkey in session.execute(stmt)]


def top(session: Session, *, workload_key: str, target_key: str, k: int) -> list[TrialRecord]:
    """The ``k`` best valid records, best first: the one ranking of records there is.

    The members of the latest accepted re-timing window (the records with a
    ``retimed_cost``) come first, by that figure; the others follow by their first
    measurement's ``cost``. A re-timed figure is never ranked against a first measurement:
    the first record is `best`'s answer (see docs/architecture.md, "Which record is best").
    Ties: earliest measured."""
    stmt = (_of(_records(), workload_key, target_key)
            .where(TrialRow.error == "none", TrialRow.cost.is_not(None))
            .order_by(TrialRow.retimed_cost.is_(None),
                      func.coalesce(TrialRow.retimed_cost, TrialRow.cost), TrialRow.id)
            .limit(max(k, 0)))
    return _run(session, stmt)


def record_retiming(session: Session, *, workload_key: str, target_key: str,
                    members: Sequence[RetimedLike], accepted: bool) -> int:
    """Write one re-timing window's outcome; returns the records it touched.

    Each member's record keeps ``extra["retime"]`` (`RetimedLike.record`); a disqualified
    member (its re-run crashed or answered wrong) stops being valid. An ``accepted`` window
    becomes the latest: its members' ``retimed_cost`` are set and every other record of the
    workload and target loses its own, in this one transaction. A window set aside (noisy)
    changes no figure."""
    ids = _ids(workload_key, target_key)
    keys = {str(int(m.config_index)): m for m in members}
    rows = {row.config_key: row for row in session.scalars(
        select(TrialRow).where(TrialRow.workload_id == ids[0], TrialRow.target_id == ids[1],
                               TrialRow.config_key.in_(list(keys))))}
    if accepted:
        figured = [key for key, m in keys.items()
                   if m.retimed_cost is not None and not m.disqualified]
        session.execute(update(TrialRow).where(
            TrialRow.workload_id == ids[0], TrialRow.target_id == ids[1],
            TrialRow.retimed_cost.is_not(None), TrialRow.config_key.not_in(figured))
            .values(retimed_cost=None))
    touched = 0
    for key, member in keys.items():
        row = rows.get(key)
        if row is None or row.error != "none":
            continue
        touched += 1
        row.extra = {**(row.extra or {}), "retime": dict(member.record())}
        if member.disqualified:  # never hand out a kernel that failed its re-run
            row.error, row.error_msg = member.error, f"on re-timing: {member.error_msg}"
            row.gflops, row.retimed_cost = None, None
        elif accepted and member.retimed_cost is not None:
            row.retimed_cost = float(member.retimed_cost)
    return touched


def _ids(workload_key: str, target_key: str) -> tuple[Any, Any]:
    """Scalar subqueries of the workload's and the target's ids."""
    return (select(WorkloadRow.id).where(WorkloadRow.key == workload_key).scalar_subquery(),
            select(TargetRow.id).where(TargetRow.key == target_key).scalar_subquery())


def measured_indices(session: Session, *, workload_key: str, target_key: str) -> set[int]:
    """Space indices already measured (valid or not; transient records aside) for a
    workload on a target."""
    stmt = (select(TrialRow.config_key).where(TrialRow.error != TRANSIENT)
            .join(WorkloadRow, TrialRow.workload_id == WorkloadRow.id)
            .join(TargetRow, TrialRow.target_id == TargetRow.id))
    return {int(key) for key in session.scalars(_of(stmt, workload_key, target_key))}


def config_record(session: Session, *, workload_key: str, target_key: str,
                  index: int) -> Optional[TrialRecord]:
    """The record of one config (its latest: a transient one gives way), or None."""
    stmt = (_of(_records(), workload_key, target_key)
            .where(TrialRow.config_key == str(int(index))).order_by(TrialRow.id.desc()).limit(1))
    found = _run(session, stmt)
    return found[0] if found else None


def trials_for(session: Session, *, workload_key: str, target_key: str) -> list[TrialRecord]:
    """Every record of a workload on a target, in measurement order."""
    return _run(session, _of(_records(), workload_key, target_key).order_by(TrialRow.id))


def history(session: Session, *, op: str, target_kind: str,
            exclude_workload_key: Optional[str]) -> dict[str, list[TrialRecord]]:
    """Records of other workloads of ``op`` on ``target_kind`` targets, by workload key
    (transient records say nothing about their configs: left out)."""
    stmt = _records().where(WorkloadRow.op == op, TargetRow.kind == target_kind,
                            TrialRow.error != TRANSIENT)
    if exclude_workload_key is not None:
        stmt = stmt.where(WorkloadRow.key != exclude_workload_key)
    grouped: dict[str, list[TrialRecord]] = {}
    for record in _run(session, stmt.order_by(TrialRow.id)):
        grouped.setdefault(record.workload_key, []).append(record)
    return grouped


def _order(sort: str) -> list[Any]:
    if sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}; got {sort!r}")
    column = getattr(TrialRow, sort.lstrip("-"))
    ordered = column.desc() if sort.startswith("-") else column.asc()
    if sort.lstrip("-") == "id":
        return [ordered]
    return [ordered.nulls_last(), TrialRow.id.asc()]


def job_trials(session: Session, *, job_id: int, offset: int = 0, limit: int = 100,
               sort: str = "id", error: Optional[str] = None) -> tuple[list[TrialRecord], int]:
    """One page of a job's records and the total matching count."""
    order = _order(sort)
    where = [TrialRow.job_id == job_id]
    if error is not None:
        where.append(TrialRow.error == error)
    total = session.scalar(select(func.count()).select_from(TrialRow).where(*where)) or 0
    stmt = _records().where(*where).order_by(*order).offset(max(offset, 0)).limit(max(limit, 0))
    return _run(session, stmt), int(total)


def job_trial_count(session: Session, *, job_id: int) -> int:
    """How many records a job has written."""
    stmt = select(func.count()).select_from(TrialRow).where(TrialRow.job_id == job_id)
    return int(session.scalar(stmt) or 0)


def job_workers(session: Session, *, job_id: int) -> list[tuple[str, int, int]]:
    """(worker, trials, failed trials) of a job per measuring worker, most trials first;
    records that name no worker come as worker ""."""
    failed = func.sum(case((TrialRow.error != "none", 1), else_=0))
    stmt = (select(TrialRow.worker, func.count(), failed).where(TrialRow.job_id == job_id)
            .group_by(TrialRow.worker))
    rows = [(worker or "", int(count), int(bad or 0))
            for worker, count, bad in session.execute(stmt)]
    # Sorted here: the dialects disagree on where NULL sorts.
    return sorted(rows, key=lambda row: (-row[1], row[0]))


def worker_counts(session: Session, *, workers: Sequence[tuple[str, str]]
                  ) -> dict[tuple[str, str], tuple[int, int]]:
    """(trials, failed trials) recorded as measured by each (worker, target key), over all
    jobs: what `job_workers` counts per job, summed (0, 0 for a pair with none)."""
    names = sorted({worker for worker, _ in workers})
    if not names:
        return {}
    failed = func.sum(case((TrialRow.error != "none", 1), else_=0))
    stmt = (select(TrialRow.worker, TargetRow.key, func.count(), failed)
            .join(TargetRow, TrialRow.target_id == TargetRow.id)
            .where(TrialRow.worker.in_(names)).group_by(TrialRow.worker, TargetRow.key))
    found = {(worker, key): (int(count), int(bad or 0))
             for worker, key, count, bad in session.execute(stmt)}
    return {pair: found.get(pair, (0, 0)) for pair in workers}


def job_trials_since(session: Session, *, job_id: int, after_id: int,
                     limit: Optional[int] = None) -> list[TrialRecord]:
    """A job's records with id greater than ``after_id``, oldest first (for event streams)."""
    stmt = (_records().where(TrialRow.job_id == job_id, TrialRow.id > after_id)
            .order_by(TrialRow.id).limit(limit))
    return _run(session, stmt)


def iter_trials(session: Session, *, workload_key: Optional[str] = None,
                target_key: Optional[str] = None, batch: int = 1000) -> Iterator[TrialRecord]:
    """All records (optionally of one workload and/or target) in id order, streamed in batches."""
    stmt = _records()
    if workload_key is not None:
        stmt = stmt.where(WorkloadRow.key == workload_key)
    if target_key is not None:
        stmt = stmt.where(TargetRow.key == target_key)
    last_id = 0
    while True:
        # Keyset pages: constant memory and no long-lived server cursor.
        page = _run(session, stmt.where(TrialRow.id > last_id).order_by(TrialRow.id).limit(batch))
        yield from page
        if len(page) < batch:
            return
        last_id = page[-1].id  # type: ignore[assignment]
