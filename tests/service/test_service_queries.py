"""The dashboard's read queries that compute: the cost model's rank correlation per batch,
and its current scores joined to the measurements."""
from __future__ import annotations

import pytest

from autotune import driver
from autotune.db import Database
from autotune.measure.result import ErrorKind, MeasureResult
from autotune.ops import Workload
from autotune.service.queries import batch_rank_correlations, model_scatter, spearman
from autotune.target import Target
from tests.service.service_helpers import SMALL_MATMUL


def test_spearman_ranks_ties_by_their_mean_and_is_none_when_undefined() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 3, 5], [1, 2, 3, 3, 0]) == pytest.approx(-2 / 19)  # scipy's value
    assert spearman([1, 2], [1, 2]) is None
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def test_each_batch_is_ranked_on_its_own_scale() -> None:
    # Batch 0's model scores in the thousands, batch 3's below zero: pooled, the scores look
    # anti-correlated with GFLOP/s, but each model ranked its own batch perfectly.
    trials = [({"predicted": 1000.0 + g, "batch": 0}, g) for g in (1.0, 2.0, 3.0)]
    trials += [({"predicted": -10.0 + g / 100, "batch": 3}, g) for g in (50.0, 60.0, 70.0, 80.0)]
    trials += [({"predicted": 5.0, "batch": 7}, None),  # failed: no measurement to rank
               ({"predicted": 2.0, "batch": 7}, 3.0), ({"predicted": 1.0, "batch": 7}, 4.0),
               ({"predicted": 0.0, "batch": 7}, 5.0), ({"batch": 7}, 9.0),  # random fill: no score
               ({"predicted": 1.0}, 1.0), ({}, 2.0)]  # older records: no batch
    scores, gflops = zip(*[(e["predicted"], g) for e, g in trials[:7]])
    assert spearman(scores, gflops) < 0
    assert batch_rank_correlations(trials) == [(0, 3, pytest.approx(1.0)),
                                               (3, 4, pytest.approx(1.0)),
                                               (7, 3, pytest.approx(-1.0))]


def test_batches_with_too_few_pairs_are_left_out() -> None:
    trials = [({"predicted": 1.0, "batch": 0}, 1.0), ({"predicted": 2.0, "batch": 0}, 2.0)]
    assert batch_rank_correlations(trials) == []


def test_the_current_models_scatter_joins_scores_to_the_jobs_valid_trials(tmp_path) -> None:
    db = Database.open(f"sqlite:///{tmp_path / 'q.db'}")
    try:
        wl, other_wl = Workload.from_dict(SMALL_MATMUL), Workload.from_dict(
            {"op": "matmul", "params": {"M": 32, "N": 64, "K": 64}})
        target = Target("llvm")
        space = driver.config_space(wl, target)
        job = db.create_job(workload=wl, target=target, tuner="xgb", trials=6, options={})
        other = db.create_job(workload=other_wl, target=target, tuner="xgb", trials=1,
                              options={})

        def ok(cost: float) -> MeasureResult:
            return MeasureResult(costs=(cost,))

        db.add_trials(wl, target, job.id, [
            (space.get(1), ok(4e-4)), (space.get(2), ok(1e-4)),
            (space.get(3), MeasureResult.failure(ErrorKind.COMPILE, "x")),
            (space.get(4), ok(2e-4)), (space.get(5), ok(3e-4))], wl.flops())
        # The same config index of another workload, in another job: not this job's trial.
        db.add_trials(other_wl, target, other.id, [(space.get(4), ok(1e-4))], other_wl.flops())
        assert model_scatter(db, job_id=job.id) is None  # no model stored
        # 3 failed: no point; 5 valid but unscored (after the fit); 9 not a trial of the job
        db.set_job_model_scores(job.id, batch=4, trials=5,
                                scores={"1": -2.0, "2": 3.0, "3": 1.0, "4": 0.5, "9": 7.0})
        scatter = model_scatter(db, job_id=job.id)
        assert scatter is not None and (scatter.batch, scatter.trials) == (4, 5)
        gflops = {i: wl.flops() / c / 1e9 for i, c in ((1, 4e-4), (2, 1e-4), (4, 2e-4))}
        assert scatter.points == [(-2.0, pytest.approx(gflops[1])),
                                  (3.0, pytest.approx(gflops[2])),
                                  (0.5, pytest.approx(gflops[4]))]
        assert scatter.rho == pytest.approx(1.0)  # ordered exactly: faster, higher score
        assert model_scatter(db, job_id=other.id) is None
    finally:
        db.dispose()
