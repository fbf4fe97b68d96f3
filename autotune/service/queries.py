"""Read queries the dashboard needs beyond `Database`'s: progress curves and sibling jobs.

They select only the columns they use, so a 10,000-trial job's curve stays a few milliseconds.
"""
from __future__ import annotations

from typing import Optional

from sqlalchemy import select

from autotune.db import Database, JobRecord
from autotune.db.schema import JobRow, TrialRow


def best_curve(db: Database, *, job_id: int, points: int) -> list[tuple[int, float]]:
    """(trial number, best GFLOP/s so far) for a job, at most ``points`` of them (plus the last)."""
    stmt = select(TrialRow.gflops).where(TrialRow.job_id == job_id).order_by(TrialRow.id)
    with db.session() as s:
        values = list(s.scalars(stmt))
    curve, best = [], 0.0
    for value in values:
        best = max(best, value or 0.0)
        curve.append(best)
    if not curve:
        return []
    n = len(curve)
    step = max(1, -(-n // max(points, 1)))
    picks = list(range(step - 1, n, step))
    if picks[-1] != n - 1:
        picks.append(n - 1)
    return [(i + 1, curve[i]) for i in picks]


def sibling_jobs(db: Database, *, job: JobRecord, limit: int = 20) -> list[JobRecord]:
    """Jobs tuning the same workload on the same target (``job`` included), oldest first."""
    with db.session() as s:
        row: Optional[JobRow] = s.get(JobRow, job.id)
        if row is None:
            return []
        stmt = (select(JobRow.id).where(JobRow.workload_id == row.workload_id,
                                        JobRow.target_id == row.target_id)
                .order_by(JobRow.id.desc()).limit(limit))
        ids = sorted(s.scalars(stmt))
    found = [db.get_job(i) for i in ids]
    return [j for j in found if j is not None]
