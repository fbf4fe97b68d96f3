"""Split candidate sets: policies, constraints, and a brute-force reference."""
from __future__ import annotations

import itertools
import math

import pytest

from autotune.space import Split
from autotune.space.split import divisors, factor_set


def reference(extent, levels, policy, max_inner=None, multiple_of=None):
    """Brute force over all inner tuples of the policy's factor set."""
    fs = factor_set(extent, policy)
    out = set()
    for inner in itertools.product(fs, repeat=levels - 1):
        p = math.prod(inner)
        if p > extent or (policy == "factors" and extent % p):
            continue
        outer = -(-extent // p)
        if outer * p >= 2 * extent:
            continue
        if inner:
            last = inner[-1]
            if max_inner is not None and last > max_inner:
                continue
            if multiple_of is not None:
                ok = last == extent if extent < multiple_of else last % multiple_of == 0
                if not ok:
                    continue
        out.add((outer,) + inner)
    return sorted(out)


# Brute force is cubic in the factor-set size at 4 levels: keep those extents small.
SHAPES = [(e, lv) for e in (1, 7, 12, 97, 100, 128, 1024) for lv in (1, 2, 3, 4)
          if lv < 4 or e <= 128]


@pytest.mark.parametrize("extent,levels", SHAPES)
@pytest.mark.parametrize("policy", ["factors", "power2", "both"])
def test_matches_brute_force(extent, levels, policy):
    s = Split("x", extent, levels, policy)
    assert list(s.candidates) == reference(extent, levels, policy)
    assert len(s) == len(s.candidates)


@pytest.mark.parametrize("policy", ["factors", "power2", "both"])
@pytest.mark.parametrize("extent", [1, 7, 97, 128, 1024])
def test_invariants(extent, policy):
    s = Split("x", extent, 3, policy)
    assert list(s.candidates) == sorted(set(s.candidates))
    for c in s.candidates:
        assert len(c) == 3 and all(f >= 1 for f in c)
        inner = math.prod(c[1:])
        assert inner <= extent and c[0] == -(-extent // inner)
        assert extent <= math.prod(c) < 2 * extent
        if policy == "factors":
            assert math.prod(c) == extent


def test_explicit_small_sets():
    assert Split("x", 1, 3).candidates == ((1, 1, 1),)
    assert Split("x", 7, 1).candidates == ((7,),)
    assert Split("x", 7, 2, "factors").candidates == ((1, 7), (7, 1))
    assert Split("x", 7, 2, "power2").candidates == ((2, 4), (4, 2), (7, 1))
    assert Split("x", 97, 2, "factors").candidates == ((1, 97), (97, 1))
    assert Split("x", 97, 2, "both").candidates == (
        (1, 97), (2, 64), (4, 32), (7, 16), (13, 8), (25, 4), (49, 2), (97, 1),
    )
    for policy in ("factors", "power2", "both"):
        assert len(Split("x", 128, 2, policy)) == 8
        assert len(Split("x", 1024, 2, policy)) == 11


def test_max_inner_and_multiple_of():
    s = Split("x", 1024, 2, max_inner=16)
    assert [c[1] for c in s.candidates] == [16, 8, 4, 2, 1]
    s = Split("x", 1024, 3, inner_multiple_of=8)
    assert s.candidates and all(c[2] % 8 == 0 for c in s.candidates)
    assert list(s.candidates) == reference(1024, 3, "both", multiple_of=8)
    # Smaller than the vector width: the whole loop is the innermost tile.
    assert Split("x", 4, 3, inner_multiple_of=8).candidates == ((1, 1, 4),)
    s = Split("x", 97, 2, inner_multiple_of=8, max_inner=32)
    assert [c[1] for c in s.candidates] == [32, 16, 8]
    with pytest.raises(ValueError, match="'x'"):
        Split("x", 97, 2, "factors", inner_multiple_of=8)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(extent=0, levels=2), dict(extent=8, levels=0), dict(extent=8, levels=2, policy="odd"),
        dict(extent=8, levels=2, max_inner=0), dict(extent=8.0, levels=2),
    ],
)
def test_bad_arguments(kwargs):
    with pytest.raises(ValueError, match="'tile'"):
        Split("tile", **kwargs)


def test_index_of_and_json():
    s = Split("tile", 64, 3)
    v = s.candidates[5]
    assert s.index_of(v) == 5
    assert s.index_of(list(v)) == 5
    assert s.to_json_value(v) == list(v)
    assert s.from_json_value(list(v)) == v
    with pytest.raises(ValueError, match="'tile'"):
        s.index_of((3, 3, 3))
    with pytest.raises(ValueError, match="'tile'"):
        s.index_of(["a"])


def test_neighbor_positions_are_one_step():
    s = Split("x", 256, 3)
    for pos in range(len(s)):
        steps = s.neighbor_positions(pos)
        assert pos not in steps and len(set(steps)) == len(steps)
        assert set(p for p in (pos - 1, pos + 1) if 0 <= p < len(s)) <= set(steps)
        for p in steps:
            if abs(p - pos) == 1:
                continue
            a, b = s.candidates[pos][1:], s.candidates[p][1:]
            ratio = sorted(x / y for x, y in zip(a, b) if x != y)
            assert ratio in ([2.0], [0.5], [0.5, 2.0])


def test_factor_helpers():
    assert divisors(1) == [1]
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]
    assert factor_set(12, "power2") == [1, 2, 4, 8]
    assert factor_set(12, "both") == [1, 2, 3, 4, 6, 8, 12]


def test_large_extents():
    # 4096 = 2**12: inner exponent triples summing to <= 12.
    assert len(Split("x", 4096, 4)) == math.comb(15, 3)
    s = Split("y", 3840, 4)
    assert all(math.prod(c[1:]) <= 3840 for c in s.candidates)


def test_value_semantics():
    a, b = Split("x", 64, 2), Split("x", 64, 2)
    assert a == b and hash(a) == hash(b)
    assert a != Split("x", 64, 2, "factors")


def test_extent_is_bounded():
    # Divisors come from trial division to sqrt(extent): 2**61 - 1 took minutes (issue 16).
    with pytest.raises(ValueError, match="extent 2199023255553 is larger than"):
        Split("x", 2**41 + 1, 3, max_inner=16)
    assert len(Split("x", 2**40, 2, max_inner=16)) == 5  # inner 1, 2, 4, 8 or 16
