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


def register_tile(facts: CpuFacts, options: Iterable[tuple[T, int, int, float]],
                  budget: int | None = None) -> T:
    """BLIS-style micro-tile: of ``(value, rows, columns, used)`` options (an accumulator of
    rows x ceil(columns/lanes) vector registers, reloading one row of vectors and
    broadcasting one operand per step; ``used``: the share of the tiled loops that is real
    work, below 1 with a tail) the one with the most useful vectors (rows x columns / lanes
    x used) within ``budget`` accumulator registers (3/4 of them by default), with no spill
    and rows of whole vectors (or of one partial vector); then with the least wasted load
    work (a partial vector loads in power-of-two pieces: 12 floats are 8 + 4); then closest
    in shape to (budget/2 rows x 2 vectors): 6 x 16 floats on AVX2 (16 registers), 12 x 32
    on AVX-512."""
    if budget is None:
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


def schedule_window_taps(out: Stage, cfg: Config) -> None:
    """The accumulator stage of a window op (depthwise conv, pool): the R x S window outside
    the register tile (``rs_inner`` False: accumulators stay live across taps) or inside
    it, the tile unrolled with its last axis vectorised, and the taps unrolled on
    ``unroll_rs``."""
    rr, rs = out.reduce_axis
    spatial = list(out.axis)
    order = [*spatial[:-2], rr, rs, *spatial[-2:]] if cfg["rs_inner"] else [rr, rs, *spatial]
    out.reorder(*order)
    for a in spatial[:-1]:
        out.unroll(a)
    out.vectorize(spatial[-1])
    if cfg["unroll_rs"] == "unroll":
        out.unroll(rr)
        out.unroll(rs)


def register_tile_limit(splits: Sequence[str], limit: int) -> Callable[[Config], str | None]:
    """A validity predicate: the product of the innermost factors of ``splits`` (the
    accumulator tile) may not exceed ``limit`` floats, beyond which it spills and the
    unrolled code explodes."""
    return partial(_tile_reason, tuple(splits), limit)


def _tile_reason(splits: tuple[str, ...], limit: int, cfg: Config) -> str | None:
    tile = math.prod(cfg[s][-1] for s in splits)
    return f"register tile of {tile} floats exceeds {limit}" if tile > limit else None


# Bounds of one unrolled reduction step (`unroll_limit`). Building the README's conv2d
# (C=K=64, 56x56, 3x3) and matmul 1024^3 on 2 cores of a Zen 4 (AVX-512, 32 registers), configs
# past them took 5 to 17 s (the build timeout is 10 s), those within 0.1 to 2 s mostly; and
# none of them can be fast: an accumulator of more than twice the vector registers spills at
# every step, and 1024 unrolled statements hide every FMA latency many times over.
ACCUMULATOR_REGISTERS_FACTOR = 2
MAX_UNROLLED = 1024


def vector_registers(extent: int, lanes: int) -> int:
    """Registers a row of ``extent`` floats vectorised by `vector_width` holds (a partial
    vector is legalised into whole registers; a scalar takes one)."""
    v = vector_width(extent, lanes)
    return extent // v * -(-v // lanes)


def unroll_limit(step: Callable[[Config], tuple[int, int]],
                 registers: int) -> Callable[[Config], str | None]:
    """A validity predicate over ``step(cfg)`` = (accumulator registers, unrolled taps of the
    reduction): the accumulator may hold at most twice the ``registers`` and the unrolled
    step (their product) at most MAX_UNROLLED statements; past either, the build takes
    seconds for code that spills."""
    return partial(_unroll_reason, step, registers)


def _unroll_reason(step: Callable[[Config], tuple[int, int]], registers: int,
                   cfg: Config) -> str | None:
    acc, taps = step(cfg)
    limit = ACCUMULATOR_REGISTERS_FACTOR * registers
    if acc > limit:
        return (f"accumulator of {acc} vector registers exceeds {limit} (twice the "
                f"registers): it spills at every step")
    if acc * taps > MAX_UNROLLED:
        return (f"unrolled step of {acc * taps} statements ({acc} accumulators x {taps} "
                f"unrolled taps) exceeds {MAX_UNROLLED}")
    return None


def all_of(*predicates: Callable[[Config], str | None]) -> Callable[[Config], str | None]:
    """A validity predicate: the first reason any of ``predicates`` gives, else None."""
    return partial(_first_reason, predicates)


def _first_reason(predicates: tuple[Callable[[Config], str | None], ...],
                  cfg: Config) -> str | None:
    for predicate in predicates:
        reason = predicate(cfg)
        if reason is not None:
            return reason
    return None


# Orders of a conv's outer tile loops (channels k, rows y, columns x; 0 outer, 1 inner),
# shared by the NCHW and channel-blocked CPU conv templates.
CONV_ORDERS = [("k0", "y0", "x0", "k1", "y1", "x1"), ("k0", "y0", "x0", "y1", "x1", "k1"),
               ("y0", "x0", "k0", "k1", "y1", "x1"), ("k0", "y0", "k1", "x0", "y1", "x1"),
               ("k0", "k1", "y0", "x0", "y1", "x1"), ("y0", "k0", "x0", "y1", "k1", "x1")]
MAX_CONV_REG_TILE = 512  # accumulator floats: beyond this the tile spills and unrolling explodes
# Orders of a window op's outer tile loops (channels c, rows y, columns x), shared by the
# depthwise and pool templates in NCHW and channel-blocked layouts.
WINDOW_ORDERS = [("c0", "y0", "x0", "c1", "y1", "x1"), ("c0", "c1", "y0", "x0", "y1", "x1"),
                 ("c0", "y0", "c1", "x0", "y1", "x1"), ("y0", "c0", "x0", "c1", "y1", "x1")]
