"""tune_loop: budget, batching, early stopping, callbacks, de-duplication, resume, pinning
(re-timing itself: test_search_retime.py)."""
from __future__ import annotations

import pytest

from autotune.measure.executor import Executor
from autotune.search import Progress, tune_loop
from autotune.search.retime import RETIME_ROUNDS
from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective


def test_budget_and_batches(wl, target, space, executor):
    result = tune_loop(wl, target, space, executor, tuner="ga", trials=40, batch_size=16, retime=0)
    assert result.trials == 40 and result.stopped == "budget"
    assert executor.batches == [16, 16, 8]
    assert len(set(executor.submitted)) == 40
    assert [h[0] for h in result.history] == list(range(1, 41))


def test_history_errors_and_best(wl, target, space, executor, objective):
    result = tune_loop(wl, target, space, executor, tuner="ga", trials=64, retime=0)
    failed = [i for i in executor.submitted if objective.fails(space.get(i))]
    assert failed and dict(result.errors) == {"compile": len(failed)}
    costs = [objective.cost(space.get(i)) for i in executor.submitted if i not in failed]
    assert result.best_cost == pytest.approx(min(costs))
    assert result.best_gflops == pytest.approx(wl.flops() / min(costs) / 1e9)
    bests = [h[2] for h in result.history]
    assert bests == sorted(bests) and bests[-1] == pytest.approx(result.best_gflops)
    assert all(h[1] == 0.0 for h in result.history if h[0] - 1 in
               [executor.submitted.index(i) for i in failed])


def test_early_stopping_after_n_trials_without_improvement(wl, target, space):
    class Flat(SyntheticObjective):
        def cost(self, config):  # the first config measured stays the best
            return 1e-3 * (1 + config.index / space.size) if config.index != 17 else 1.0

    executor = SyntheticExecutor(Flat(space))
    result = tune_loop(wl, target, space, executor, trials=1000, batch_size=8,
                       early_stopping=20, tuner="grid", retime=0)
    assert result.stopped == "early_stopping"
    assert result.trials == 24  # best at trial 1; checked per batch: 23 without a new best
    assert result.best_config.index == 0


def test_callbacks_see_progress_and_can_stop(wl, target, space, executor):
    seen: list[Progress] = []

    def stop_after_two(p: Progress):
        seen.append(p)
        return False if len(seen) == 2 else None

    result = tune_loop(wl, target, space, executor, tuner="ga", trials=100, batch_size=10,
                       callbacks=[stop_after_two])
    assert result.stopped == "callback" and result.trials == 20
    assert [p.trials_done for p in seen] == [10, 20] and seen[0].budget == 100
    assert len(seen[1].last_batch) == 10 and seen[1].best_gflops == result.best_gflops
    assert seen[1].errors == sum(result.errors.values())
    assert len(executor.submitted) == 20  # stopped by a callback: no re-timing


def test_exhausted_space_stops_early(wl, target, small_space):
    executor = SyntheticExecutor(SyntheticObjective(small_space))
    result = tune_loop(wl, target, small_space, executor, tuner="ga", trials=100, retime=0)
    assert result.stopped == "exhausted" and result.trials == 25


def test_dedup_across_runs_with_a_database(wl, target, space, objective, db):
    first = SyntheticExecutor(objective)
    r1 = tune_loop(wl, target, space, first, trials=48, db=db, tuner="ga", seed=0, retime=0)
    second = SyntheticExecutor(objective)
    r2 = tune_loop(wl, target, space, second, trials=48, db=db, tuner="ga", seed=0, retime=0)
    assert r1.trials == r2.trials == 48
    assert not set(first.submitted) & set(second.submitted)
    assert len(db.measured_indices(wl, target)) == 96
    assert r2.best_cost <= r1.best_cost  # the best known includes the first run's


def test_resuming_a_job_counts_its_recorded_trials(wl, target, space, objective, db):
    job = db.create_job(workload=wl, target=target, tuner="random", trials=40, options={})
    first = SyntheticExecutor(objective)
    r1 = tune_loop(wl, target, space, first, trials=40, db=db, job_id=job.id, tuner="random",
                   batch_size=8, callbacks=[lambda p: p.trials_done < 16])
    assert r1.trials == 16 and r1.stopped == "callback"
    second = SyntheticExecutor(objective)
    r2 = tune_loop(wl, target, space, second, trials=40, db=db, job_id=job.id, tuner="random",
                   batch_size=8, retime=0)
    assert r2.trials == 24 and r2.history[0][0] == 17 and r2.history[-1][0] == 40
    assert len(second.submitted) == 24
    assert db.job_trial_count(job.id) == 40
    assert db.get_job(job.id).trials_done == 40


def test_a_resumed_job_counts_the_errors_recorded_before_it(wl, target, space, objective, db):
    """After a restart the progress (and the result) count the job's earlier failures too."""
    job = db.create_job(workload=wl, target=target, tuner="random", trials=40, options={})
    r1 = tune_loop(wl, target, space, SyntheticExecutor(objective), trials=40, db=db,
                   job_id=job.id, tuner="random", batch_size=8,
                   callbacks=[lambda p: p.trials_done < 16])
    before = sum(r1.errors.values())
    assert before > 0  # the objective fails 10% of configs
    seen: list[Progress] = []
    r2 = tune_loop(wl, target, space, SyntheticExecutor(objective), trials=40, db=db,
                   job_id=job.id, tuner="random", batch_size=8, retime=0,
                   callbacks=[seen.append])
    recorded = [t for t in db.trials_for(wl, target) if t.job_id == job.id and t.error != "none"]
    assert seen[-1].errors == sum(r2.errors.values()) == len(recorded) >= before
    assert seen[0].errors >= before


def test_bad_arguments(wl, target, space, executor):
    with pytest.raises(ValueError, match="early_stopping"):
        tune_loop(wl, target, space, executor, tuner="ga", trials=8, early_stopping=0)
    with pytest.raises(ValueError, match="batch_size"):
        tune_loop(wl, target, space, executor, tuner="ga", trials=8, batch_size=0)
    with pytest.raises(ValueError, match="unknown tuner"):
        tune_loop(wl, target, space, executor, trials=8, tuner="nope")


def test_model_scores_are_recorded_with_the_trials(tmp_path):
    from autotune.search.base import Tuner

    class Scored(Tuner):
        """Random proposals with a made-up model score (index parity)."""

        def _propose(self, n):
            return []

        def predicted(self, config):
            return float(config.index % 2)

    import autotune
    from autotune.db import Database
    from autotune.search.loop import tune_loop
    from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective

    wl = autotune.workload("matmul", M=64, N=64, K=64)
    target = autotune.Target("llvm")
    sp = autotune.config_space(wl, target)
    db = Database.open(f"sqlite:///{tmp_path}/p.db")
    tune_loop(wl, target, sp, SyntheticExecutor(SyntheticObjective(sp)), trials=8, tuner=Scored,
              db=db, batch_size=4, retime=0)
    records = db.trials_for(wl, target)
    assert len(records) == 8
    assert all(r.extra["predicted"] == r.config_index % 2 for r in records)
    # Which batch (the trials before it) each score came from: the model is refit between them.
    assert [r.extra["batch"] for r in sorted(records, key=lambda r: r.id)] == [0] * 4 + [4] * 4


def test_the_loop_closes_its_tuner_however_it_ends(wl, target, space, executor):
    from autotune.search.random_tuner import RandomTuner

    closed = []

    class Closing(RandomTuner):
        def close(self):
            closed.append(self.observed)

    tune_loop(wl, target, space, executor, trials=16, tuner=Closing, batch_size=8, retime=0)
    assert closed == [16]

    class Broken(SyntheticExecutor):
        def submit(self, inputs):
            raise RuntimeError("the device went away")

    with pytest.raises(RuntimeError, match="device went away"):
        tune_loop(wl, target, space, Broken(SyntheticObjective(space)), trials=16,
                  tuner=Closing, retime=0)
    assert closed == [16, 0]


def test_xgb_workers_stop_with_the_loop(wl, target):
    import autotune
    from autotune.search.xgb_tuner import XGBTuner

    made = []

    class Watched(XGBTuner):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    sp = autotune.config_space(wl, target)
    tune_loop(wl, target, sp, SyntheticExecutor(SyntheticObjective(sp)), trials=24,
              tuner=Watched, batch_size=8, retime=0, tuner_options={"workers": 1})
    (tuner,) = made
    assert tuner.workers is not None and tuner.workers.stats["batches"] > 0
    assert tuner.workers.pids == []  # closed
    made.clear()
    tune_loop(wl, target, sp, SyntheticExecutor(SyntheticObjective(sp)), trials=8,
              tuner=Watched, batch_size=8, retime=0, tuner_options={"workers": 0})
    assert made[0].workers is None


def test_batches_are_at_least_the_executors_preferred_size(wl, target, space, objective):
    class Cluster(SyntheticExecutor):
        """Three devices: two chunks each keep all of them busy."""

        def preferred_batch(self) -> int:
            return 6

    executor = Cluster(objective)
    result = tune_loop(wl, target, space, executor, tuner="ga", trials=20, batch_size=4, retime=0)
    assert result.trials == 20 and executor.batches == [6, 6, 6, 2]


def test_retiming_measures_on_one_device_when_the_executor_can_pin(wl, target, space,
                                                                   objective):
    from contextlib import contextmanager

    class Cluster(SyntheticExecutor):
        pinned_batches: list[int] = []

        @contextmanager
        def pinned(self):
            outer = self

            class One(Executor):
                def submit(self, inputs):
                    outer.pinned_batches.append(len(inputs))
                    return outer.submit(inputs)

            yield One()

    executor = Cluster(objective)
    result = tune_loop(wl, target, space, executor, tuner="ga", trials=16, batch_size=8, retime=3)
    assert result.retimed and executor.pinned_batches  # every re-timing went through it
    assert executor.pinned_batches == [RETIME_ROUNDS * len(result.retimed)]  # one window
    assert executor.batches[:2] == [8, 8]


XGB_FAST = {"min_records": 8, "workers": 0, "n_estimators": 30, "n_chains": 16, "sa_steps": 6,
            "transfer": False}


@pytest.mark.parametrize("tuner", ["xgb", "random", "ga"])
def test_the_current_models_scores_of_the_jobs_trials_are_kept(tuner, wl, target, db):
    """After each refit the model scores every valid trial of the job, the job's earlier
    runs' included, and those scores replace the last ones on the job; tuners without a
    model store nothing."""
    import autotune

    sp = autotune.config_space(wl, target)
    objective = SyntheticObjective(sp, seed=1, fail_rate=0.2)
    opts = XGB_FAST if tuner == "xgb" else {}
    job = db.create_job(workload=wl, target=target, tuner=tuner, trials=24, options={})
    seen = []

    def after_batch(progress):
        seen.append(db.job_model_scores(job.id))
        return progress.trials_done < 16  # stop, then resume as a restarted job would

    run = dict(trials=24, tuner=tuner, tuner_options=opts, db=db, job_id=job.id, batch_size=8,
               retime=0)
    tune_loop(wl, target, sp, SyntheticExecutor(objective), callbacks=[after_batch], **run)
    tune_loop(wl, target, sp, SyntheticExecutor(objective), **run)
    stored = db.job_model_scores(job.id)
    if tuner != "xgb":
        assert stored is None and seen == [None, None]
        return
    # Fit after each batch (the model needs min_records = 8), scoring the trials so far;
    # after the resumed run's batch, all 24 (the first run's 16 included).
    assert [(s["batch"], s["trials"]) for s in seen] == [(0, 8), (8, 16)]
    assert (stored["batch"], stored["trials"]) == (16, 24)
    records = db.trials_for(wl, target)
    valid = {str(r.config_index) for r in records if r.ok}
    assert len(valid) < 24 and set(stored["scores"]) == valid  # failed trials: no score
    for n, scores in ((8, seen[0]["scores"]), (16, seen[1]["scores"])):
        assert set(scores) == {str(r.config_index) for r in records[:n] if r.ok}
    # each refit's scores replace the last: another model, other scores
    assert any(stored["scores"][k] != v for k, v in seen[1]["scores"].items())


def test_at_most_the_cap_of_trials_is_scored(wl, target, db, monkeypatch):
    """Past MODEL_SCORES_CAP valid trials: the fastest half and the most recent of the rest."""
    import autotune
    from autotune.search import session as loop

    monkeypatch.setattr(loop, "MODEL_SCORES_CAP", 6)
    sp = autotune.config_space(wl, target)
    objective = SyntheticObjective(sp, seed=2)
    job = db.create_job(workload=wl, target=target, tuner="xgb", trials=24, options={})
    tune_loop(wl, target, sp, SyntheticExecutor(objective), trials=24, tuner="xgb",
              tuner_options=XGB_FAST, db=db, job_id=job.id, batch_size=8, retime=0)
    records = db.trials_for(wl, target)
    fastest = sorted(records, key=lambda r: r.cost)[:3]
    rest = [r for r in records if r not in fastest][-3:]
    assert set(db.job_model_scores(job.id)["scores"]) == {
        str(r.config_index) for r in fastest + rest}


def test_scoring_is_best_effort_and_needs_a_job(wl, target, db):
    """Without a job (or a database) nothing is scored; a tuner failing to score logs it and
    the job goes on."""
    import autotune
    from autotune.search.xgb_tuner import XGBTuner

    calls = []

    class Failing(XGBTuner):
        def model_scores(self, configs):
            calls.append(len(configs))
            raise RuntimeError("the model broke")

    sp = autotune.config_space(wl, target)
    objective = SyntheticObjective(sp, seed=3)
    run = dict(trials=16, tuner=Failing, tuner_options=XGB_FAST, batch_size=8, retime=0)
    assert tune_loop(wl, target, sp, SyntheticExecutor(objective), **run).trials == 16
    assert tune_loop(wl, target, sp, SyntheticExecutor(objective), db=db, **run).trials == 16
    assert calls == []
    job = db.create_job(workload=wl, target=target, tuner="xgb", trials=16, options={})
    result = tune_loop(wl, target, sp, SyntheticExecutor(objective), db=db, job_id=job.id, **run)
    assert result.trials == 16 and calls == [8, 16]
    assert db.job_model_scores(job.id) is None
