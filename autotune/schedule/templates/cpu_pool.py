"""CPU template for max_pool2d (NCHW).

Channels are independent, so parallelism comes from (n, channel blocks, row blocks) and
the work per task from a (rows x columns) tile of running maxima vectorised along output
columns, with the R x S window unrollable and the -inf padding inlined or materialised.
"""
from __future__ import annotations

from functools import partial
from typing import Any

from autotune.ops import Workload
from autotune.schedule.definitions import max_pool2d_graph
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.common import (
    MAX_UNROLLED,
    all_of,
    innermost_factors,
    nearest_split,
    parallel_levels,
    parallel_outer,
    register_tile_limit,
    unroll_limit,
    vector_registers,
    vector_width,
)
from autotune.schedule.templates.cpu_conv2d import schedule_pad
from autotune.schedule.templates.cpu_depthwise import ORDERS
from autotune.space import Annotate, Choice, Config, ConfigSpace, Knob, Reorder, Split
from autotune.target import Target
from autotune.target.cpu_facts import CpuFacts, facts_of

MAX_REG_TILE = 256
MAX_DEFAULT_ROWS = 8


def space(wl: Workload, target: Target) -> ConfigSpace:
    lanes = target.vector_lanes
    knobs: list[Knob] = [
        Split("tile_c", wl.dim("C"), 3, max_inner=4),
        Split("tile_y", wl.out_h, 3, max_inner=8),
        Split("tile_x", wl.out_w, 3, max_inner=4 * lanes),
        Reorder("order", ORDERS),
        Choice("pad", ["inline", "buffer"]),
        Annotate("unroll_rs", ["none", "unroll"]),
        Choice("rs_inner", [False, True]),
        Choice("parallel", [1, 2, 3]),
    ]
    facts = facts_of(target)
    validity = all_of(register_tile_limit(("tile_c", "tile_y", "tile_x"), MAX_REG_TILE),
                      unroll_limit(partial(unrolled_step, lanes, wl.dim("R") * wl.dim("S")),
                                   facts.vector_registers))
    return ConfigSpace(knobs, default=default_values(wl, facts, knobs), validity=validity,
                       name="cpu_max_pool2d")


def unrolled_step(lanes: int, taps: int, cfg: Config) -> tuple[int, int]:
    """(running-max registers, unrolled taps): channels x rows x the columns' vectors, and
    the R x S window when it is unrolled."""
    acc = cfg["tile_c"][2] * cfg["tile_y"][2] * vector_registers(cfg["tile_x"][2], lanes)
    return acc, taps if cfg["unroll_rs"] == "unroll" else 1


def default_values(wl: Workload, facts: CpuFacts, knobs: list[Any]) -> dict[str, Any]:
    """Default: a tile of up to `MAX_DEFAULT_ROWS` rows of one vector of columns (a tail
    where stores mask natively: AVX-512), whose rows share input rows (stride 2: 17 input
    rows for 8 output rows of a 3x3 window, not 24), the window unrolled; channels outermost,
    fused with the batch for the parallel loop until every core has 4+ tasks. ResNet's stem
    pool (64 channels 112x112, 3x3 stride 2), one core of a Zen 5: 1 x 16 ran 172 us,
    4 x 16 93, 8 x 16 67, 8 x 32 85. Where only narrow tiles divide the width (a prime
    width without native masking), a vector with a tail rather than single columns."""
    tile_c, tile_y, tile_x = knobs[0], knobs[1], knobs[2]
    tail = facts.lanes if facts.vector_bits >= 512 else 0
    x2 = max(x for x in innermost_factors(tile_x, tail) if x <= facts.lanes)
    if 2 * x2 <= min(facts.lanes, wl.out_w):  # a prime width on AVX2: a vector with a tail
        x2 = max(x for x in {c[-1] for c in tile_x.candidates} if x <= facts.lanes)
    y2 = max(y for y in innermost_factors(tile_y) if y <= MAX_DEFAULT_ROWS)
    tc = nearest_split(tile_c, (1, 1))
    ty = nearest_split(tile_y, (1, y2))
    unrolled = y2 * vector_registers(x2, facts.lanes) * wl.dim("R") * wl.dim("S")
    return {
        "tile_c": tc,
        "tile_y": ty,
        "tile_x": nearest_split(tile_x, (1, x2)),
        "order": ORDERS[0],
        "pad": "inline",
        "unroll_rs": "unroll" if unrolled <= MAX_UNROLLED else "none",
        "rs_inner": False,
        "parallel": parallel_levels([wl.dim("N") * tc[0], ty[0], 1], facts, 3),
    }


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    g = max_pool2d_graph(wl)
    s = g.schedule()
    schedule_pad(s, g.pad, cfg["pad"])
    out = s.cache_write(g.output, "local")
    st = s[g.output]
    n, c, y, x = st.axis
    c0, c1, c2 = st.tile(c, cfg["tile_c"])
    y0, y1, y2 = st.tile(y, cfg["tile_y"])
    x0, x1, x2 = st.tile(x, cfg["tile_x"])
    names = {"c0": c0, "c1": c1, "y0": y0, "y1": y1, "x0": x0, "x1": x1}
    outer = [n, *(names[a] for a in cfg["order"])]
    v = vector_width(cfg["tile_x"][2], target.vector_lanes)
    xo, xv = st.split(x2, factor=v)
    st.reorder(*outer, c2, y2, xo, xv)
    st.vectorize(xv)
    parallel_outer(st, outer, cfg["parallel"] + 1)

    out.compute_at(st, outer[-1])
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
    return s
