"""The ask/tell contract of every tuner: distinct, never-measured, in-pool proposals."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.measure.result import MeasureInput
from autotune.search import TUNERS, make_tuner, tune_loop
from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective
from autotune.space import Choice, ConfigSpace
from tests.search.search_cases import make_space


def _drive(tuner, executor, wl, target, rounds, n):
    """Ask/tell for `rounds` batches of `n`; returns every proposed index in order."""
    proposed = []
    for _ in range(rounds):
        batch = tuner.next_batch(n)
        proposed += [c.index for c in batch]
        inputs = [MeasureInput(wl, target, c) for c in batch]
        tuner.update(inputs, executor.submit(inputs))
    return proposed


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_never_repeats_nor_proposes_measured(name, space, executor, wl, target):
    measured = set(range(0, space.size, 3))
    tuner = make_tuner(name, space, seed=1, measured=measured)
    proposed = _drive(tuner, executor, wl, target, rounds=12, n=16)
    assert len(proposed) == 12 * 16
    assert len(set(proposed)) == len(proposed)
    assert not set(proposed) & measured


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_exhausts_a_small_space_exactly_once(name, small_space, wl, target):
    executor = SyntheticExecutor(SyntheticObjective(small_space, seed=0))
    tuner = make_tuner(name, small_space, seed=0, measured={0, 1}, pop_size=4) if name == "ga" \
        else make_tuner(name, small_space, seed=0, measured={0, 1})
    proposed = _drive(tuner, executor, wl, target, rounds=5, n=7)
    assert sorted(proposed) == list(range(2, 25))
    assert not tuner.has_next()
    assert tuner.next_batch(4) == []


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_pool_restricts_proposals(name, space, executor, wl, target):
    pool = set(np.random.default_rng(0).choice(space.size, 60, replace=False).tolist())
    tuner = make_tuner(name, space, seed=2, pool=pool, measured={min(pool)})
    proposed = _drive(tuner, executor, wl, target, rounds=5, n=16)
    assert set(proposed) == pool - {min(pool)}  # 59 configs, all of them, nothing else
    assert not tuner.has_next()


def test_random_is_reproducible_by_seed(space):
    a = [c.index for c in make_tuner("random", space, seed=5).next_batch(10)]
    b = [c.index for c in make_tuner("random", space, seed=5).next_batch(10)]
    c = [c.index for c in make_tuner("random", space, seed=6).next_batch(10)]
    assert a == b != c


def test_grid_walks_index_order_skipping_measured(space):
    tuner = make_tuner("grid", space, measured={0, 2, 5})
    assert [c.index for c in tuner.next_batch(4)] == [1, 3, 4, 6]
    assert [c.index for c in tuner.next_batch(2)] == [7, 8]


def test_update_tracks_the_best_by_throughput(space, executor, objective, wl, target):
    tuner = make_tuner("random", space, seed=0)
    _drive(tuner, executor, wl, target, rounds=3, n=16)
    costs = {i: objective.cost(space.get(i)) for i in executor.submitted
             if not objective.fails(space.get(i))}
    assert tuner.best_config.index == min(costs, key=costs.get)
    assert tuner.best_score == pytest.approx(1 / costs[tuner.best_config.index])


def test_ga_breeds_from_the_population_after_the_first_generation(space, executor, wl, target):
    tuner = make_tuner("ga", space, seed=0, pop_size=16)
    _drive(tuner, executor, wl, target, rounds=1, n=16)
    children = tuner.next_batch(16)
    # children share knob values with measured parents far more often than random configs do
    parents = space.encode([space.get(i) for i in executor.submitted])
    kids = space.encode(children)
    shared = np.mean([(parents == k).sum(axis=1).max() for k in kids])
    assert shared >= 3  # of 5 knobs; a random config shares about 2.6 with its closest of 16


@pytest.mark.parametrize("selection", ["tournament", "roulette"])
def test_ga_beats_random_on_a_smooth_objective(selection, wl, target):
    space = make_space(knobs=6, size=10)  # a million configs
    gaps = {"ga": [], "random": []}
    for seed in range(3):
        objective = SyntheticObjective(space, seed=seed, sharpness=50.0)
        for name in gaps:
            opts = {"selection": selection} if name == "ga" else {}
            result = tune_loop(wl, target, space, SyntheticExecutor(objective), trials=192,
                               tuner=name, tuner_options=opts, seed=seed, retime=0)
            gaps[name].append(result.best_cost / objective.best_cost - 1)
    assert np.mean(gaps["ga"]) < 0.5 * np.mean(gaps["random"]), gaps


@pytest.mark.parametrize("name", sorted(TUNERS))
def test_the_first_batch_starts_with_the_default_config(name):
    """So a search never ends below the schedule one gets without tuning."""
    knobs = [Choice(f"k{i}", list(range(8))) for i in range(4)]
    space = ConfigSpace(knobs, default={"k0": 5, "k1": 2, "k2": 7, "k3": 1}, name="fake")
    default = space.default().index
    assert default != 0
    first = make_tuner(name, space, seed=3).next_batch(8)
    assert first[0].index == default and len({c.index for c in first}) == 8
    later = make_tuner(name, space, seed=3, measured={default}).next_batch(8)
    assert default not in {c.index for c in later}  # measured before: never again
    pool = set(range(100, 200))
    replay = make_tuner(name, space, seed=3, pool=pool).next_batch(8)
    assert {c.index for c in replay} <= pool  # outside the replay pool: not offered
