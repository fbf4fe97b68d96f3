"""Reorder, Annotate and Choice knobs."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.space import Annotate, Choice, Reorder


def test_reorder():
    r = Reorder("order", [["i", "j", "k"], ("i", "k", "j"), ("k", "i", "j")])
    assert r.candidates == (("i", "j", "k"), ("i", "k", "j"), ("k", "i", "j"))
    assert len(r) == 3 and r.kind == "reorder"
    assert r.index_of(("i", "k", "j")) == 1
    assert r.index_of(["k", "i", "j"]) == 2
    assert r.to_json_value(r.candidates[0]) == ["i", "j", "k"]
    assert r.from_json_value(["i", "j", "k"]) == ("i", "j", "k")
    # Neighbours: adjacent candidates, plus swapping adjacent axes when listed.
    assert set(r.neighbor_positions(0)) == {1}
    assert set(r.neighbor_positions(1)) == {0, 2}
    assert set(r.neighbor_positions(2)) == {1}
    assert r == Reorder("order", (("i", "j", "k"), ("i", "k", "j"), ("k", "i", "j")))
    hash(r)


@pytest.mark.parametrize(
    "orders", [[("i", "j"), ("i", "k")], [("i", "i")], [("i", "j"), ("i", "j")], []]
)
def test_reorder_rejects_bad_orders(orders):
    with pytest.raises(ValueError, match="'order'"):
        Reorder("order", orders)


def test_annotate():
    a = Annotate("ann_j", ("none", "unroll", "vectorize"))
    assert len(a) == 3 and a.index_of("vectorize") == 2
    assert a.neighbor_positions(0) == (1,) and a.neighbor_positions(1) == (0, 2)
    with pytest.raises(ValueError, match="'ann_j'"):
        a.index_of("parallel")
    with pytest.raises(ValueError, match="'ann_j'"):
        Annotate("ann_j", ["none", 3])


def test_choice():
    c = Choice("unroll", [0, 16, 64, 512])
    assert c.index_of(64) == 2 and c.index_of(np.int64(64)) == 2
    assert c.to_json_value(16) == 16 and c.from_json_value(16) == 16
    assert Choice("flags", [True, False, None, "x", 1.5]).index_of(None) == 2
    assert Choice("w", [np.int32(4), np.int32(8)]).options == (4, 8)
    assert type(Choice("w", [np.int32(4)]).options[0]) is int
    with pytest.raises(ValueError, match="'unroll'"):
        c.index_of(3)
    with pytest.raises(ValueError, match="'unroll'"):
        c.index_of([16])
    for bad in ([(1, 2)], [float("nan")], [1, 1], []):
        with pytest.raises(ValueError, match="'k'"):
            Choice("k", bad)


def test_describe_truncates():
    d = Choice("c", list(range(40))).describe(limit=5)
    assert d == {
        "name": "c", "kind": "choice", "size": 40,
        "candidates": [0, 1, 2, 3, 4], "truncated": True,
    }
    assert Reorder("o", [("a", "b")]).describe()["candidates"] == [["a", "b"]]


def test_empty_name_rejected():
    with pytest.raises(ValueError):
        Choice("", [1])
