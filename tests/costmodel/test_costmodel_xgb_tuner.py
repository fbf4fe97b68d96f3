"""The xgb tuner: replayed real measurements, the annealing path, transfer, bookkeeping."""
import numpy as np
import pytest

from autotune.driver import config_space
from autotune.measure.executor import Executor
from autotune.measure.replay import ReplayExecutor
from autotune.measure.result import ErrorKind, MeasureInput, MeasureResult
from autotune.search.base import TuningTask
from autotune.search.loop import tune_loop
from autotune.search.random_tuner import RandomTuner
from autotune.search.xgb_tuner import XGBTuner
from tests.costmodel.cm_helpers import dataset, trial_records

FAST = dict(n_chains=16, sa_steps=6, sa_budget=128, n_estimators=60)


def main_data():
    key = next(iter(dataset()))
    return key, dataset()[key]


def first_hit(result, threshold: float) -> int:
    """Trials until the best so far reached ``threshold`` GFLOP/s (a large number if never)."""
    return next((n for n, _, best in result.history if best >= threshold - 1e-9), 10**6)


def test_replay_finds_a_top3_config_sooner_than_random():
    key, (wl, target, _, _, y) = main_data()
    executor = ReplayExecutor(trial_records(key))
    pool = executor.indices_for(wl)
    top3 = np.sort(y)[::-1][2]
    sp = config_space(wl, target)
    hits = {}
    for name, tuner in (("xgb", XGBTuner), ("random", RandomTuner)):
        hits[name] = [first_hit(tune_loop(wl, target, sp, executor, trials=96, tuner=tuner,
                                          seed=seed, pool=pool, batch_size=16, retime=0), top3)
                      for seed in range(4)]
    # measured here: xgb [66, 49, 22, 17], random [49, 31, never, never] (320 in the pool)
    found = {name: sum(h <= 96 for h in v) for name, v in hits.items()}
    assert found["xgb"] >= 3 and found["xgb"] > found["random"], hits


class SyntheticExecutor(Executor):
    """Executor-protocol fake for the annealing path: a smooth cost over the knobs (fast with
    a 4-wide inner i tile and a 32-wide inner j tile), failing for one pack_b value."""

    def __init__(self):
        self.seen: list[int] = []

    def submit(self, inputs):
        out = []
        for inp in inputs:
            c = inp.config
            self.seen.append(c.index)
            if c["pack_b"] and c["tile_k"][1] == 1:
                out.append(MeasureResult.failure(ErrorKind.RUNTIME, "synthetic"))
                continue
            err = abs(np.log2(c["tile_i"][2] / 4)) + abs(np.log2(c["tile_j"][2] / 32))
            out.append(MeasureResult(costs=(1e-3 * (1 + err + 0.1 * (c["order"][0] == "i0")),)))
        return out

    def close(self):
        pass


@pytest.mark.parametrize("sa_model", ["knob", "main"])
def test_annealing_over_a_large_space_proposes_fresh_distinct_configs(sa_model):
    _, (wl, target, configs, _, _) = main_data()
    sp = config_space(wl, target)
    assert sp.size > 10 * 2048  # too big to score exhaustively: the chains walk it
    measured = {c.index for c in configs[:5]}
    ex = SyntheticExecutor()
    opts = {**FAST, "sa_model": sa_model}
    res = tune_loop(wl, target, sp, ex, trials=64, tuner=XGBTuner, tuner_options=opts, seed=0,
                    batch_size=16, retime=0)
    assert len(ex.seen) == len(set(ex.seen)) == 64
    rnd = tune_loop(wl, target, sp, SyntheticExecutor(), trials=64, tuner=RandomTuner, seed=0,
                    batch_size=16, retime=0)
    assert res.best_gflops > rnd.best_gflops  # the walk homes in on the optimum

    tuner = XGBTuner(sp, seed=1, measured=measured, task=TuningTask(wl, target), **opts)
    batch = tuner.next_batch(16)  # no data yet: random
    tuner.update([MeasureInput(wl, target, c) for c in batch], ex.submit(
        [MeasureInput(wl, target, c) for c in batch]))
    assert tuner.own is not None and len(tuner.chains) == 0
    assert (tuner.twin is not None) == (sa_model == "knob")
    batch2 = tuner.next_batch(16)
    scored = [tuner.predicted(c) for c in batch2]  # kept with the trials for the dashboard
    assert sum(p is not None for p in scored) >= 12 and tuner.predicted(batch[0]) is None
    assert len(tuner.chains) == FAST["n_chains"]  # chains persist to the next round
    picked = {c.index for c in batch + batch2}
    assert len(picked) == 32 and not picked & measured
    # lowered: the first batch, then the twin's best visits or the budgeted walk
    assert tuner.cache.stats["misses"] <= 16 + FAST["n_chains"] + FAST["sa_budget"] + 16


class FakeHistoryDB:
    """The `history` part of `Database`, recording how it was asked."""

    def __init__(self, history):
        self.history_calls = []
        self._history = history

    def history(self, op, target_kind, exclude_workload_key=None):
        self.history_calls.append((op, target_kind, exclude_workload_key))
        return {k: v for k, v in self._history.items() if k != exclude_workload_key}


def test_transfer_steers_the_first_batch_with_other_workloads_records():
    key, (wl, target, configs, _, y) = main_data()
    db = FakeHistoryDB({k: trial_records(k) for k in dataset()})
    pool = {c.index for c in configs}
    gflops = {c.index: g for c, g in zip(configs, y)}
    tuner = XGBTuner(config_space(wl, target), seed=0, pool=pool, task=TuningTask(wl, target, db))
    first = tuner.next_batch(16)
    assert db.history_calls == [("matmul", "llvm", key)]
    assert tuner.base is not None and key not in tuner.base.workloads
    guided = np.mean([gflops[c.index] for c in first])
    rng = np.random.default_rng(0)
    randoms = [np.mean(rng.choice(y, 16, replace=False)) for _ in range(200)]
    assert guided > np.percentile(randoms, 95), (guided, np.median(randoms))
    off = XGBTuner(config_space(wl, target), seed=0, pool=pool, task=TuningTask(wl, target, db),
                   transfer=False)
    off.next_batch(4)
    assert off.base is None and len(db.history_calls) == 1


def test_options_and_knob_only_mode():
    _, (wl, target, configs, _, y) = main_data()
    sp = config_space(wl, target)
    with pytest.raises(ValueError, match="features"):
        XGBTuner(sp, features="bogus")
    tuner = XGBTuner(sp, seed=0, pool={c.index for c in configs}, n_estimators=30)
    assert tuner.kind == "knob"  # no workload in the task: nothing to lower
    batch = tuner.next_batch(16)
    lookup = {c.index: g for c, g in zip(configs, y)}
    results = [MeasureResult(costs=(1.0 / lookup[c.index],)) for c in batch]
    tuner.update([MeasureInput(wl, target, c) for c in batch], results)
    assert tuner.own is not None and len(tuner.next_batch(16)) == 16


def test_members_take_turns_filling_a_batch():
    _, (wl, target, configs, _, _) = main_data()
    sp = config_space(wl, target)
    cfgs = configs[:6]
    tuner = XGBTuner(sp, seed=0, diversity=1.0)
    scores = np.array([[6, 5, 4, 3, 2, 1], [1, 2, 3, 4, 5, 6]], dtype=float)
    picks = tuner._pick(cfgs, scores, 4)
    assert [c.index for c in picks] == [cfgs[i].index for i in (0, 5, 1, 4)]
    scores[:, 5] = -np.inf  # fails to lower: never picked, and the batch may come up short
    scores[:, 4] = -np.inf
    picks = tuner._pick(cfgs, scores, 6)
    assert {c.index for c in picks} == {c.index for c in cfgs[:4]}
    # a pick shares at most `diversity` of its knobs with earlier ones while any such is left
    near = sp.neighbors(cfgs[0], np.random.default_rng(0), k=1)[0]  # one knob differs
    enc = sp.encode(configs)
    far = next(c for c, d in zip(configs, enc) if np.mean(d == enc[0]) <= 0.5)
    strict = XGBTuner(sp, seed=0, diversity=0.5)
    one = np.array([[3.0, 2.0, 1.0]])
    assert [c.index for c in strict._pick([cfgs[0], near, far], one, 2)] == [
        cfgs[0].index, far.index]
    assert [c.index for c in strict._pick([cfgs[0], near], one[:, :2], 2)] == [
        cfgs[0].index, near.index]  # none that different left: the best one left


def test_model_scores_are_the_current_models_ranking():
    """`model_scores` scores with the model `_propose` ranks by (the members' mean): scored
    before any refit, a proposed batch gets exactly the scores it was proposed with; after a
    refit, every measured config gets a finite score of the new model. None before a model."""
    _, (wl, target, _, _, _) = main_data()
    sp = config_space(wl, target)
    ex = SyntheticExecutor()
    tuner = XGBTuner(sp, seed=0, task=TuningTask(wl, target), min_records=8, workers=0, **FAST)

    def measure(batch):
        inputs = [MeasureInput(wl, target, c) for c in batch]
        tuner.update(inputs, ex.submit(inputs))

    first = tuner.next_batch(8)
    assert tuner.model_scores(first) is None  # random initial design: no model yet
    measure(first)
    batch = tuner.next_batch(16)
    proposed = [c for c in batch if tuner.predicted(c) is not None]
    assert len(proposed) >= 12
    now = tuner.model_scores(proposed)
    assert now == pytest.approx([tuner.predicted(c) for c in proposed], rel=1e-6)
    order = np.argsort(now, kind="stable")
    assert list(order) == list(np.argsort([tuner.predicted(c) for c in proposed], kind="stable"))
    measure(batch)
    scores = tuner.model_scores(first + batch)
    assert scores is not None and len(scores) == 24 and np.isfinite(scores).all()
    assert len(set(scores)) > 1


def test_transfer_learns_only_from_kernels_of_the_same_family():
    """A float32 task's base model leaves out half workloads' records (tensor-core kernels,
    another template), and would take them in without the family filter: they lower fine
    on their own target."""
    from autotune.db.values import TrialRecord
    from autotune.ops import workload
    from autotune.target import Target

    key, (wl, target, configs, _, y) = main_data()
    half = workload("matmul", M=256, N=256, K=256, dtype="float16")
    cuda = Target("cuda -arch=sm_90")
    sp = config_space(half, cuda)
    rng = np.random.default_rng(0)
    half_records = []
    for i, index in enumerate(rng.choice(len(sp), 40, replace=False)):
        c = sp.get(int(index))
        if sp.invalid_reason(c):
            continue
        cost = 1e-4 * (1 + i)
        half_records.append(TrialRecord(workload_key=half.key, target_key=cuda.key,
                                        config=c.to_dict(), config_index=c.index, costs=(cost,),
                                        cost=cost, gflops=half.flops() / cost / 1e9,
                                        error="none"))
    assert len(half_records) >= 8
    history = {k: trial_records(k) for k in dataset()}
    history[half.key] = half_records
    tuner = XGBTuner(config_space(wl, target), seed=0, pool={c.index for c in configs},
                     task=TuningTask(wl, target, FakeHistoryDB(history)))
    tuner.next_batch(4)
    assert tuner.base is not None
    assert half.key not in tuner.base.workloads
    assert set(tuner.base.workloads) == set(dataset()) - {key}


def _synthetic_records(wl, target, n=10, seed=0):
    """Valid records of ``wl`` on ``target`` with made-up, distinct timings."""
    from autotune.db.values import TrialRecord
    sp = config_space(wl, target)
    out = []
    for c in sp.sample(np.random.default_rng(seed), 10 * n):
        if sp.invalid_reason(c) is None and len(out) < n:
            cost = 1e-4 * (1 + len(out))
            out.append(TrialRecord(workload_key=wl.key, target_key=target.key,
                                   config=c.to_dict(), config_index=c.index, costs=(cost,),
                                   cost=cost, gflops=wl.flops() / cost / 1e9, error="none"))
    return out


def test_wgmma_and_wmma_records_train_only_their_own_template():
    """Half matmuls on sm_90a take the wgmma template, on sm_90 (or with rows TMA cannot
    copy) the wmma one: a task of either learns from its own family's records only."""
    from autotune.ops import workload
    from autotune.target import Target
    hopper, ampere = Target("cuda -arch=sm_90a"), Target("cuda -arch=sm_90")
    wgmma = workload("matmul", M=256, N=256, K=128, dtype="float16")
    wmma = workload("matmul", M=128, N=128, K=256, dtype="float16")
    ragged = workload("matmul", M=64, N=100, K=64, dtype="float16")  # N * 2 bytes % 16 != 0
    history = {wgmma.key: _synthetic_records(wgmma, hopper),
               wmma.key: _synthetic_records(wmma, ampere),
               ragged.key: _synthetic_records(ragged, hopper)}
    for task_wl, task_target, learns in (
            (workload("matmul", M=512, N=256, K=64, dtype="float16"), hopper, {wgmma.key}),
            (workload("matmul", M=96, N=64, K=64, dtype="bfloat16"), ampere,
             {wmma.key, ragged.key})):
        tuner = XGBTuner(config_space(task_wl, task_target), seed=0,
                         task=TuningTask(task_wl, task_target, FakeHistoryDB(history)))
        tuner.next_batch(4)
        assert tuner.base is not None and set(tuner.base.workloads) == learns
