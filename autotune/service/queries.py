"""Read queries the dashboard needs beyond `Database`'s: progress curves, the cost model's
rank correlation per batch and its current scores against the measurements, and sibling jobs.

They select only the columns they use, so a 10,000-trial job's curve stays a few milliseconds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

import numpy as np
from sqlalchemy import select

from autotune import driver
from autotune.costmodel.model import spearman as model_spearman
from autotune.db import Database, JobRecord
from autotune.db.schema import JobRow, TrialRow
from autotune.ops import Workload
from autotune.service.schemas import DefaultStanding
from autotune.target import Target


def best_curve(db: Database, *, job_id: int, points: int) -> list[tuple[int, float]]:
    """(trial number, fastest first measurement so far in GFLOP/s) for a job, at most
    ``points`` of them (plus the last). Re-timing never changes these figures: the job's
    best (`Database.best`'s ranking) is ``jobs.best_gflops``."""
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


def rank_correlation(db: Database, *, job_id: int) -> list[tuple[int, int, float]]:
    """`batch_rank_correlations` of a job's stored trials."""
    stmt = (select(TrialRow.extra, TrialRow.gflops).where(TrialRow.job_id == job_id)
            .order_by(TrialRow.id))
    with db.session() as s:
        rows = s.execute(stmt).all()
    return batch_rank_correlations((extra or {}, gflops) for extra, gflops in rows)


def batch_rank_correlations(trials: Iterable[tuple[Mapping[str, Any], Optional[float]]]
                            ) -> list[tuple[int, int, float]]:
    """(batch, pairs, Spearman rho) per batch of ``(extra, gflops)`` trials, in batch order.

    A batch's scores come from one model version (each refit has its own scale), so scores
    are ranked only within their batch. Only valid trials with a stored ``predicted`` and
    ``batch`` count; a batch needs 3 of them, and varied scores and measurements."""
    batches: dict[int, tuple[list[float], list[float]]] = {}
    for extra, gflops in trials:
        score, batch = extra.get("predicted"), extra.get("batch")
        if gflops is None or not isinstance(score, (int, float)) or not isinstance(batch, int):
            continue
        scores, measured = batches.setdefault(batch, ([], []))
        scores.append(float(score))
        measured.append(float(gflops))
    out = []
    for batch, (scores, measured) in sorted(batches.items()):
        rho = spearman(scores, measured)
        if rho is not None:
            out.append((batch, len(scores), rho))
    return out


@dataclass(frozen=True)
class ModelScatter:
    """The job's current cost model (fit after ``batch``, with ``trials`` of the job
    measured) against the measurements: (score, GFLOP/s) of each valid trial it scored,
    in measurement order, and their Spearman ``rho`` (None when undefined)."""

    batch: int
    trials: int
    points: list[tuple[float, float]]
    rho: Optional[float]


def model_scatter(db: Database, *, job_id: int) -> Optional[ModelScatter]:
    """The job's stored current-model scores (`Database.job_model_scores`) joined to its
    valid trials by ``config_key`` (exact: the config index in decimal, unique per workload
    and target); None when the job has none (a tuner without a model, or not fit yet).

    Scores of configs whose trial is no longer valid (failed on re-timing) are left out;
    the GFLOP/s are the first measurements'."""
    stored = db.job_model_scores(job_id)
    scores = stored.get("scores") if stored is not None else None
    if stored is None or not isinstance(scores, dict):
        return None
    stmt = (select(TrialRow.config_key, TrialRow.gflops)
            .where(TrialRow.job_id == job_id, TrialRow.gflops.is_not(None))
            .order_by(TrialRow.id))
    with db.session() as s:
        rows = s.execute(stmt).all()
    points = [(float(scores[key]), float(gflops)) for key, gflops in rows
              if gflops is not None and isinstance(scores.get(key), (int, float))]
    rho = spearman([p[0] for p in points], [p[1] for p in points])
    return ModelScatter(int(stored.get("batch", 0)), int(stored.get("trials", 0)), points, rho)


def spearman(x: Iterable[float], y: Iterable[float]) -> Optional[float]:
    """Spearman's rank correlation (ties ranked by their mean); None below 3 pairs or when
    either side is constant (undefined)."""
    a, b = np.asarray(list(x), dtype=float), np.asarray(list(y), dtype=float)
    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return model_spearman(a, b)


def default_standing(db: Database, *, job: JobRecord) -> Optional[DefaultStanding]:
    """The default config of the job's workload on its target and its record's figure, or
    None when this version cannot read the workload or make its space."""
    try:
        index = driver.config_space(Workload.from_json(job.workload_key),
                                    Target(job.target_key)).default().index
    except ValueError:
        return None
    record = db.config_record(job.workload_key, job.target_key, index)
    if record is None or not record.ok:
        return DefaultStanding(config_index=str(index))
    best = db.best(job.workload_key, job.target_key)
    return DefaultStanding(config_index=str(index), gflops=record.ranked_gflops,
                           retimed=record.retimed_cost is not None,
                           is_best=best is not None and best.config_index == index)


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
