"""Helpers shared by templates: choosing default knob values, parallel outer loops."""
from __future__ import annotations

import math
from functools import partial
from typing import Callable, Iterable, Sequence, TypeVar

from autotune.schedule.schedule import Axis, Stage
from autotune.space import Config, Split
from autotune.target.cpu_facts import CpuFacts

T = TypeVar("T")


def nearest_split(knob: Split, inner: Sequence[int]) -> tuple[int, ...]:
    """The candidate of ``knob`` whose inner factors are closest (in log scale) to ``inner``,
    preferring tilings without a tail (padded iterations cost guards and wasted work).
    An exact innermost factor (a register tile picked from `innermost_factors`) is kept."""
    exact = [c for c in knob.candidates if c[-1] == inner[-1]] or knob.candidates

    def dist(c: tuple[int, ...]) -> float:
        waste = math.prod(c) / knob.extent - 1
        return sum(abs(math.log2(a) - math.log2(b)) for a, b in zip(c[1:], inner)) + 4 * waste
    return min(exact, key=dist)


def innermost_factors(knob: Split, tail_multiple: int = 0) -> list[int]:
    """The innermost factors ``knob`` allows that divide its extent, ascending (all of them
    when only 1 does): a register tile with a tail runs guarded, masked code, which made the
    depthwise 56x56 default 3.5x slower with a 16-wide tile than with an exact 8 on AVX2.
    With ``tail_multiple`` (the lanes, where stores mask natively: AVX-512), multiples of
    it that leave a tail are allowed too: there a masked edge tile costs less than a partial
    vector in every step (depthwise 56x56: 8 x 32 with a tail ran 158 GFLOP/s, 8 x 28 110)."""
    allowed = sorted({c[-1] for c in knob.candidates})
    exact = [f for f in allowed if knob.extent % f == 0]
    if len(exact) <= 1:
        return allowed
    return sorted(set(exact) | {f for f in allowed if tail_multiple and f % tail_multiple == 0})


def tail_use(extent: int, factor: int) -> float:
    """The share of a loop tiled by ``factor`` that is real work (1.0 without a tail)."""
    return extent / (-(-extent // factor) * factor)


def register_tile(facts: CpuFacts, options: Iterable[tuple[T, int, int, float]]) -> T:
    """BLIS-style micro-tile: of ``(value, rows, columns, used)`` options (an accumulator of
    rows x ceil(columns/lanes) vector registers, reloading one row of vectors and
    broadcasting one operand per step; ``used``: the share of the tiled loops that is real
    work, below 1 with a tail) the one with the most useful vectors (rows x columns / lanes
    x used) within 3/4 of the registers, with no spill and rows of whole vectors (or of one
    partial vector); then with the least wasted load work (a partial vector loads in
    power-of-two pieces: 12 floats are 8 + 4); then closest in shape to (budget/2 rows x 2
    vectors): 6 x 16 floats on AVX2 (16 registers), 12 x 32 on AVX-512."""
    budget = 3 * facts.vector_registers // 4
    ratio = budget / 4  # rows per vector of the ideal (budget/2) x 2 tile
    lanes = facts.lanes

    def score(option: tuple[T, int, int, float]) -> tuple[bool, float, float, float]:
        _, rows, columns, used = option
        vectors = -(-columns // lanes)
        acc = rows * vectors
        # A row wider than one vector but not a whole number of them is legalised into
        # slow code: conv2d 320->1280 1x1 ran 8 GFLOP/s with 40 channels (16 lanes), 223 with 32.
        whole = columns <= lanes or columns % lanes == 0
        fits = whole and acc <= budget and acc + vectors + 1 <= facts.vector_registers
        pieces = columns // lanes + bin(columns % lanes).count("1")
        useful = rows * columns / lanes * used
        return (fits, useful if fits else -acc, columns * used / (pieces * lanes),
                -abs(math.log2(rows / vectors / ratio)))
    return max(options, key=score)[0]


def fit_count(budget_bytes: int, unit_bytes: int, cap: int) -> int:
    """How many units of ``unit_bytes`` fit in ``budget_bytes`` (at least 1, at most cap)."""
    return max(1, min(cap, budget_bytes // max(1, unit_bytes)))


def parallel_levels(extents: Sequence[int], facts: CpuFacts, most: int) -> int:
    """Fewest outer loops (1..most) whose fused extent gives every core 4+ tasks (load
    balance when tasks are uneven), else ``most``."""
    for count in range(1, most + 1):
        if math.prod(extents[:count]) >= 4 * facts.cores:
            return count
    return most


def vector_width(extent: int, lanes: int) -> int:
    """SIMD width for an innermost tile of ``extent``: full vectors when it is a multiple of
    the target's lanes, else the whole tile as one (LLVM splits odd widths legally)."""
    return lanes if extent % lanes == 0 else extent


def parallel_outer(st: Stage, loops: Sequence[Axis], count: int) -> Axis:
    """Fuse the first ``count`` of ``loops`` (adjacent, outermost) and mark the result parallel."""
    fused = st.fuse(*loops[:count]) if count > 1 else loops[0]
    st.parallel(fused)
    return fused


def register_tile_limit(splits: Sequence[str], limit: int) -> Callable[[Config], str | None]:
    """A validity predicate: the product of the innermost factors of ``splits`` (the
    accumulator tile) may not exceed ``limit`` floats, beyond which it spills and the
    unrolled code explodes."""
    return partial(_tile_reason, tuple(splits), limit)


def _tile_reason(splits: tuple[str, ...], limit: int, cfg: Config) -> str | None:
    tile = math.prod(cfg[s][-1] for s in splits)
    return f"register tile of {tile} floats exceeds {limit}" if tile > limit else None
