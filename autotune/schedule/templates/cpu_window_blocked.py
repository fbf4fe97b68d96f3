"""CPU template for the window ops in a channel-blocked layout (NCHW[x]c): depthwise conv2d
(multiplier 1), max_pool2d and avg_pool2d.

A vector of x channels is contiguous at every pixel, so each tap of the R x S window is a
whole-vector load of the input and (depthwise) of the packed weight, [C/x, R, S, x]: no
gather at any stride, unlike the NCHW templates, whose vectors run along output columns.
The register tile is (y2 x x2) output pixels by c2 channel blocks; output channel blocks,
rows and columns are tiled in three levels, the window outside the tile or inside it, and
the padding (zeros, or -inf for the max-pool) inlined or materialised once.
"""
from __future__ import annotations

from functools import partial
from typing import Any

from autotune.ops import Workload
from autotune.schedule.definitions import POOL_OPS, window_blocked_graph
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.common import (
    MAX_UNROLLED,
    WINDOW_ORDERS,
    all_of,
    innermost_factors,
    nearest_split,
    parallel_levels,
    parallel_outer,
    register_tile,
    register_tile_limit,
    schedule_window_taps,
    tail_use,
    unroll_limit,
    vector_registers,
    vector_width,
)
from autotune.schedule.templates.cpu_conv2d_blocked import schedule_blocked_pad
from autotune.space import Annotate, Choice, Config, ConfigSpace, Knob, Reorder, Split
from autotune.target import Target
from autotune.target.cpu_facts import CpuFacts, facts_of

MAX_REG_TILE = 512  # accumulator floats (32 AVX-512 vectors)


def space(wl: Workload, target: Target) -> ConfigSpace:
    knobs: list[Knob] = [
        Split("tile_c", wl.dim("C") // wl.block, 3, max_inner=4),  # channel blocks per tile
        Split("tile_y", wl.out_h, 3, max_inner=8),
        Split("tile_x", wl.out_w, 3, max_inner=16),
        Reorder("order", WINDOW_ORDERS),
        Choice("pad", ["inline", "buffer"]),
        Annotate("unroll_rs", ["none", "unroll"]),
        Choice("rs_inner", [False, True]),
        Choice("parallel", [1, 2, 3]),
    ]
    facts = facts_of(target)
    validity = all_of(register_tile_limit(("tile_c", "tile_y", "tile_x"), MAX_REG_TILE // wl.block),
                      unroll_limit(partial(unrolled_step, wl.block, target.vector_lanes,
                                           wl.dim("R") * wl.dim("S")),
                                   facts.vector_registers))
    name = f"cpu_{wl.op}_blocked" if wl.op in POOL_OPS else "cpu_depthwise_blocked"
    return ConfigSpace(knobs, default=default_values(wl, facts, knobs), validity=validity,
                       name=name)


def unrolled_step(block: int, lanes: int, taps: int, cfg: Config) -> tuple[int, int]:
    """(accumulator registers, unrolled taps) of the register tile's step."""
    acc = cfg["tile_c"][2] * cfg["tile_y"][2] * cfg["tile_x"][2] * \
        vector_registers(block, lanes)
    return acc, taps if cfg["unroll_rs"] == "unroll" else 1


def default_values(wl: Workload, facts: CpuFacts, knobs: list[Any]) -> dict[str, Any]:
    """A register tile of (y2 x x2) pixels of one channel block (channels share nothing) by
    `register_tile`, rows of at most 2 where the rows are strided (they share few input
    rows); whole rows per tile; the window unrolled where it stays within `MAX_UNROLLED`;
    outer loops fused until every core has 4+ tasks. The padding is inlined: a guard on a
    tap is one test for a whole vector, while a padded copy is another pass over the input
    (one core of a Rocket Lake, 96 channels 112x112 stride 2: 99 us inlined, 287 buffered;
    144 channels 56x56: 55 and 104; NCHW's template 122 and 81)."""
    tile_c, tile_y, tile_x = knobs[0], knobs[1], knobs[2]
    b, (sy, _) = wl.block, wl.pair("stride")
    rows = [y for y in innermost_factors(tile_y) if sy == 1 or y <= 2]
    options = [((y, x), y * x, b, tail_use(wl.out_h, y) * tail_use(wl.out_w, x))
               for y in rows or [1] for x in innermost_factors(tile_x)]
    y2, x2 = register_tile(facts, options)
    tc = nearest_split(tile_c, (1, 1))
    ty = nearest_split(tile_y, (1, y2))
    acc = y2 * x2 * vector_registers(b, facts.lanes)
    return {
        "tile_c": tc,
        "tile_y": ty,
        "tile_x": nearest_split(tile_x, (-(-wl.out_w // x2), x2)),
        "order": WINDOW_ORDERS[0],
        "pad": "inline",
        "unroll_rs": "unroll" if acc * wl.dim("R") * wl.dim("S") <= MAX_UNROLLED else "none",
        "rs_inner": False,
        "parallel": parallel_levels([wl.dim("N") * tc[0], ty[0], 1], facts, 3),
    }


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    v = vector_width(wl.block, target.vector_lanes)
    g = window_blocked_graph(wl)
    s = g.schedule()
    schedule_blocked_pad(s, g.pad, cfg["pad"], target.vector_lanes)
    out = s.cache_write(g.output, "local")
    st = s[g.output]
    n, c, y, x, ci = st.axis
    c0, c1, c2 = st.tile(c, cfg["tile_c"])
    y0, y1, y2 = st.tile(y, cfg["tile_y"])
    x0, x1, x2 = st.tile(x, cfg["tile_x"])
    names = {"c0": c0, "c1": c1, "y0": y0, "y1": y1, "x0": x0, "x1": x1}
    outer = [n, *(names[a] for a in cfg["order"])]
    cio, civ = st.split(ci, factor=v)
    st.reorder(*outer, c2, y2, x2, cio, civ)
    parallel_outer(st, outer, cfg["parallel"] + 1)
    st.vectorize(civ)

    out.compute_at(st, outer[-1])
    # with the window inside the tile, a tap's loaded weight vector serves one pixel at a time
    schedule_window_taps(out, cfg)

    if g.packed is not None:
        ps = s[g.packed]
        ps.parallel(ps.axis[0])
        _, cv = ps.split(ps.axis[-1], factor=v)
        ps.vectorize(cv)
    return s
