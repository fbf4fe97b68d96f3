"""ConfigSpace indexing, default, validity, arrays and description."""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from autotune.space import Annotate, Choice, ConfigSpace, Reorder, Split


def matmul_space(**kw):
    """About 1.6e9 configs: a realistic CPU matmul template."""
    return ConfigSpace(
        [
            Split("tile_m", 1024, 4),
            Split("tile_n", 1024, 4),
            Split("tile_k", 1024, 3),
            Reorder("order", list(itertools.permutations("ijk"))),
            Annotate("ann_n", ["none", "unroll", "vectorize", "parallel"]),
            Choice("unroll", [0, 16, 64, 512]),
            Choice("pack", [False, True]),
        ],
        name="matmul",
        **kw,
    )


def huge_space():
    """More than 2**64 configs."""
    knobs = [Split(f"s{i}", 3840, 4) for i in range(6)] + [Choice("c", list(range(7)))]
    return ConfigSpace(knobs, name="huge")


def test_size_and_shape():
    s = matmul_space()
    assert 10**9 <= len(s) == s.size == math.prod(s.dims)
    assert s.dims == tuple(len(k) for k in s.knobs)
    assert s.knob("ann_n") is s.knobs[4]
    with pytest.raises(KeyError):
        s.knob("nope")
    assert huge_space().size > 2**64


def test_digit_order_first_knob_most_significant():
    s = ConfigSpace([Choice("a", [0, 1, 2]), Choice("b", [0, 1])])
    assert [tuple(c.values()) for c in s] == list(itertools.product([0, 1, 2], [0, 1]))
    assert s.digits(3) == (1, 1) and s.from_digits((2, 0)) == 4


@pytest.mark.parametrize("make", [matmul_space, huge_space])
def test_index_round_trips(make):
    s = make()
    rng = np.random.default_rng(1)
    # Compose wide random ints: numpy cannot draw indices beyond int64.
    wide = [sum(int(x) << (30 * j) for j, x in enumerate(row))
            for row in rng.integers(0, 2**30, (200, 4))]
    picks = [0, s.size - 1] + [w % s.size for w in wide]
    for i in picks:
        cfg = s.get(i)
        assert cfg.index == i
        assert s.index_of(cfg) == i
        assert s.index_of(dict(cfg)) == i
        assert s.from_digits(s.digits(i)) == i
        assert s.config(dict(cfg)) == cfg
    with pytest.raises(IndexError):
        s.get(s.size)
    with pytest.raises(IndexError):
        s.get(-1)


def test_get_accepts_numpy_ints():
    s = matmul_space()
    assert s.get(np.int64(12345)).index == 12345


def test_get_many_is_cheap():
    # The hot path: 10,000 gets take a few tens of ms; no timing asserted.
    s = matmul_space()
    idx = np.random.default_rng(0).integers(0, s.size, 10_000).tolist()
    assert [c.index for c in map(s.get, idx)] == idx


def test_config_and_index_of_errors():
    s = matmul_space()
    values = dict(s.get(99))
    assert s.config({**values, "tile_m": list(values["tile_m"])}).index == 99
    with pytest.raises(ValueError, match="'tile_k'"):
        s.index_of({**values, "tile_k": (3, 3)})
    with pytest.raises(ValueError, match="'unroll'"):
        s.config({k: v for k, v in values.items() if k != "unroll"})
    with pytest.raises(ValueError, match="'bogus'"):
        s.config({**values, "bogus": 1})
    with pytest.raises(ValueError, match="'pack'"):
        s.from_digits(s.digits(99)[:-1] + (2,))


def test_default():
    assert matmul_space().default() == matmul_space().get(0)
    s = matmul_space()
    chosen = dict(s.get(777))
    chosen["order"] = list(chosen["order"])  # JSON-ish values are fine
    s = matmul_space(default=chosen)
    assert s.default().index == 777
    with pytest.raises(ValueError, match="'pack'"):
        matmul_space(default={k: v for k, v in chosen.items() if k != "pack"})
    with pytest.raises(ValueError, match="'unroll'"):
        matmul_space(default={**chosen, "unroll": 3})


def test_validity():
    def threads(cfg):
        n = cfg["tile_m"][-1] * cfg["tile_n"][-1]
        return f"{n} threads > 1024" if n > 1024 else None

    s = matmul_space(validity=threads)
    rng = np.random.default_rng(0)
    cfgs = s.sample(rng, 300)
    for c in cfgs:
        assert s.is_valid(c) == (c["tile_m"][-1] * c["tile_n"][-1] <= 1024)
        assert (s.invalid_reason(c) is None) == s.is_valid(c)
    assert any(not s.is_valid(c) for c in cfgs)
    plain = matmul_space()
    assert all(plain.is_valid(c) and plain.invalid_reason(c) is None for c in cfgs)


def test_encode_decode_round_trip():
    for s in (matmul_space(), huge_space()):
        cfgs = s.sample(np.random.default_rng(2), 500)
        rows = s.encode(cfgs)
        assert rows.dtype == np.int64 and rows.shape == (500, len(s.knobs))
        assert (rows >= 0).all() and (rows < np.array(s.dims)).all()
        assert s.decode_rows(rows) == [c.index for c in cfgs]
        assert rows[0].tolist() == list(s.digits(cfgs[0].index))
        assert s.encode([]).shape == (0, len(s.knobs)) and s.decode_rows([]) == []
        assert (s.encode_indices([c.index for c in cfgs]) == rows).all()


def test_decode_rejects_bad_rows():
    s = matmul_space()
    rows = s.encode([s.get(5)])
    rows[0, 5] = 4
    with pytest.raises(ValueError, match="'unroll'"):
        s.decode_rows(rows)
    with pytest.raises(ValueError):
        s.decode_rows(np.zeros((1, 3), dtype=np.int64))
    with pytest.raises(IndexError):
        s.encode_indices([s.size])


def test_iteration():
    s = ConfigSpace([Split("t", 16, 2), Annotate("a", ["none", "unroll"])])
    cfgs = list(s)
    assert [c.index for c in cfgs] == list(range(len(s)))
    assert cfgs == [s.get(i) for i in range(len(s))]
    with pytest.raises(TypeError):
        iter(matmul_space())


def test_empty_space_has_one_config():
    s = ConfigSpace([])
    assert len(s) == 1 and dict(s.get(0)) == {} and list(s) == [s.get(0)]


def test_duplicate_knob_names_rejected():
    with pytest.raises(ValueError, match="'a'"):
        ConfigSpace([Choice("a", [1]), Choice("a", [2])])


def test_description_is_json():
    s = matmul_space(validity=lambda c: None)
    d = s.to_description()
    json.dumps(d)
    assert d["size"] == s.size and d["has_validity"]
    assert [k["name"] for k in d["knobs"]] == list(s.names)
    tile = d["knobs"][0]
    assert tile["kind"] == "split" and tile["extent"] == 1024 and tile["truncated"]
    assert len(tile["candidates"]) < tile["size"]
    assert d["default"] == s.default().to_dict()
