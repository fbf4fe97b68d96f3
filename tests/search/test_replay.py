"""ReplayExecutor: recorded trials answer measurements; tuners search inside the pool."""
from __future__ import annotations

import json

import numpy as np
import pytest

import autotune
from autotune.measure.replay import NOT_IN_POOL, ReplayExecutor
from autotune.measure.result import ErrorKind, MeasureInput
from autotune.ops import workload
from autotune.search import TUNERS, tune_loop
from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective, synthetic_records


@pytest.fixture
def pool_configs(space):
    rng = np.random.default_rng(7)
    return space.sample(rng, 200)


@pytest.fixture
def records(objective, wl, target, pool_configs):
    return synthetic_records(objective, wl, target, pool_configs)


def test_answers_recorded_configs_and_rejects_others(records, wl, target, space, pool_configs):
    replay = ReplayExecutor(records)
    assert len(replay) == 200 and replay.indices == {c.index for c in pool_configs}
    outside = next(i for i in range(space.size) if i not in replay.indices)
    inputs = [MeasureInput(wl, target, pool_configs[0]),
              MeasureInput(wl, target, space.get(outside))]
    hit, miss = replay.submit(inputs)
    assert hit.costs == tuple(records[0]["costs"]) and hit.extra["replayed"] is True
    assert miss.error is ErrorKind.INSTANTIATION and miss.error_msg == NOT_IN_POOL
    failed = next(r for r in records if r["error"] != "none")
    res = replay.submit([MeasureInput(wl, target, space.get(failed["config"]["index"]))])[0]
    assert res.error is ErrorKind.COMPILE and not res.ok


def test_pools_are_per_workload(records, wl):
    other = workload("matmul", M=32, N=32, K=32)
    replay = ReplayExecutor(records)
    assert replay.indices_for(wl) == replay.indices and replay.indices_for(other) == frozenset()


def test_from_db_and_from_jsonl_gz_agree(wl, target, db, tmp_path):
    # Configs of the workload's real space: an import refuses any other.
    space = autotune.config_space(wl, target)
    pool_configs = space.sample(np.random.default_rng(7), 200)
    records = synthetic_records(SyntheticObjective(space, seed=3, fail_rate=0.1), wl, target,
                                pool_configs)
    db.import_jsonl(iter(json.dumps(r) + "\n" for r in records))
    path = tmp_path / "pool.jsonl.gz"
    assert db.export_jsonl_path(path) == 200
    inputs = [MeasureInput(wl, target, c) for c in pool_configs[:20]]
    from_db = ReplayExecutor.from_db(db, wl, target).submit(inputs)
    from_file = ReplayExecutor.from_jsonl(path, workload=wl, target=target).submit(inputs)
    assert [r.costs for r in from_db] == [r.costs for r in from_file]
    assert [r.error for r in from_db] == [r.error for r in from_file]
    assert ReplayExecutor.from_jsonl(path, target="cuda -arch=sm_90").indices == frozenset()


def test_a_config_recorded_on_two_targets_is_ambiguous(records):
    twin = dict(records[0], target="llvm -mcpu=other -cores=4 -vector-bits=256")
    with pytest.raises(ValueError, match="choose one target"):
        ReplayExecutor([records[0], twin])


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_tuners_in_replay_mode_stay_in_the_pool(name, wl, target):
    # The workload's real space: a model-guided tuner lowers its candidates for features.
    space = autotune.config_space(wl, target)
    objective = SyntheticObjective(space, seed=5, fail_rate=0.1)
    configs = space.sample(np.random.default_rng(5), 200)
    replay = ReplayExecutor(synthetic_records(objective, wl, target, configs))
    result = tune_loop(wl, target, space, replay, trials=64, tuner=name,
                       pool=replay.indices_for(wl), retime=0)
    assert result.trials == 64
    assert "instantiation" not in result.errors  # never asked for a config outside the pool


def test_grid_over_the_whole_pool_finds_its_best(records, wl, target, space):
    replay = ReplayExecutor(records)
    result = tune_loop(wl, target, space, replay, trials=500, tuner="grid",
                       pool=replay.indices, retime=0)
    assert result.stopped == "exhausted" and result.trials == 200
    assert result.best_cost == min(r["cost"] for r in records if r["cost"] is not None)


def test_replay_matches_the_live_run_it_recorded(objective, wl, target, space, db):
    live = tune_loop(wl, target, space, SyntheticExecutor(objective), tuner="ga", trials=48, db=db,
                     seed=4, retime=0)
    replay = ReplayExecutor.from_db(db, wl, target)
    again = tune_loop(wl, target, space, replay, tuner="ga", trials=48, seed=4,
                      pool=replay.indices, retime=0)
    assert again.best_cost == pytest.approx(live.best_cost)
