"""sample, neighbors, mutate and crossover."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.space import Annotate, Choice, ConfigSpace, Reorder, Split


def space(extent=512):
    return ConfigSpace(
        [
            Split("tile_x", extent, 3),
            Split("tile_y", 97, 2),
            Reorder("order", [("i", "j", "k"), ("i", "k", "j"), ("k", "i", "j")]),
            Annotate("ann", ["none", "unroll", "vectorize"]),
            Choice("single", [7]),
        ]
    )


def big_space():
    return ConfigSpace([Split(f"s{i}", 3840, 4) for i in range(6)])


def differing(a, b):
    return [n for n in a if a[n] != b[n]]


@pytest.mark.parametrize("make", [space, big_space])
def test_sample_distinct_and_excluding(make):
    s = make()
    rng = np.random.default_rng(0)
    first = s.sample(rng, 200)
    assert len({c.index for c in first}) == 200
    assert all(s.get(c.index) == c for c in first[:20])
    excl = {c.index for c in first}
    second = s.sample(rng, 200, exclude=excl)
    assert len({c.index for c in second}) == 200
    assert not excl & {c.index for c in second}
    assert s.sample(rng, 0) == []


def test_sample_is_deterministic_per_seed():
    s = big_space()
    a = s.sample(np.random.default_rng(7), 50)
    b = s.sample(np.random.default_rng(7), 50)
    assert a == b


def test_sample_returns_all_remaining_when_few_left():
    s = ConfigSpace([Choice("a", list(range(5))), Choice("b", list(range(4)))])
    rng = np.random.default_rng(3)
    assert sorted(c.index for c in s.sample(rng, 50)) == list(range(20))
    got = s.sample(rng, 50, exclude={0, 5, 19, 1000})
    assert sorted(c.index for c in got) == sorted(set(range(20)) - {0, 5, 19})
    assert len({c.index for c in s.sample(rng, 15)}) == 15  # dense path, not all
    assert s.sample(rng, 3, exclude=set(range(20))) == []


def test_sample_is_roughly_uniform():
    s = ConfigSpace([Choice("a", list(range(3))), Choice("b", list(range(3)))])
    rng = np.random.default_rng(0)
    counts = np.zeros(9)
    for _ in range(900):
        counts[s.sample(rng, 1)[0].index] += 1
    assert counts.min() > 60 and counts.max() < 140


@pytest.mark.parametrize("make", [space, big_space])
def test_neighbors_differ_in_exactly_one_knob(make):
    s = make()
    rng = np.random.default_rng(1)
    for cfg in s.sample(rng, 30):
        ns = s.neighbors(cfg)
        assert ns and len({n.index for n in ns}) == len(ns)
        for n in ns:
            assert len(differing(cfg, n)) == 1
            assert s.index_of(dict(n)) == n.index
            assert s.get(n.index) == n
        sub = s.neighbors(cfg, rng, k=3)
        assert len(sub) == min(3, len(ns)) and set(sub) <= set(ns)


def test_neighbors_include_both_directions_and_factor_moves():
    s = space()
    cfg = s.config({"tile_x": (8, 8, 8), "tile_y": (7, 16), "order": ("i", "k", "j"),
                    "ann": "unroll", "single": 7})
    ns = s.neighbors(cfg)
    by_knob = {}
    for n in ns:
        by_knob.setdefault(differing(cfg, n)[0], []).append(n)
    assert "single" not in by_knob
    assert {n["ann"] for n in by_knob["ann"]} == {"none", "vectorize"}
    assert {n["order"] for n in by_knob["order"]} == {("i", "j", "k"), ("k", "i", "j")}
    tiles = {n["tile_x"] for n in by_knob["tile_x"]}
    assert {(8, 16, 4), (8, 4, 16), (16, 4, 8), (4, 16, 8)} <= tiles
    assert {(4, 32), (13, 8)} <= {n["tile_y"] for n in by_knob["tile_y"]}


def test_neighbors_of_a_json_config():
    s = space()
    cfg = s.get(123)
    from autotune.space import Config

    loose = Config.from_json(cfg.to_json())
    assert s.neighbors(loose) == s.neighbors(cfg)


def test_neighbors_k_needs_rng():
    s = space()
    with pytest.raises(ValueError):
        s.neighbors(s.get(0), k=2)


def test_mutate():
    s = space()
    rng = np.random.default_rng(5)
    for cfg in s.sample(rng, 50):
        m = s.mutate(cfg, rng)
        assert len(differing(cfg, m)) == 1 and "single" not in differing(cfg, m)
        assert s.get(m.index) == m
        m2 = s.mutate(cfg, rng, n_knobs=3)
        assert len(differing(cfg, m2)) == 3
        assert len(differing(cfg, s.mutate(cfg, rng, n_knobs=99))) == 4
    one = ConfigSpace([Choice("only", [1])])
    assert one.mutate(one.get(0), rng) == one.get(0)


def test_crossover():
    s = big_space()
    rng = np.random.default_rng(9)
    a, b = s.sample(rng, 2)
    seen_mixed = False
    for _ in range(20):
        c = s.crossover(a, b, rng)
        assert all(c[n] in (a[n], b[n]) for n in c)
        assert s.get(c.index) == c
        seen_mixed |= c != a and c != b
    assert seen_mixed
    assert s.crossover(a, a, rng) == a
