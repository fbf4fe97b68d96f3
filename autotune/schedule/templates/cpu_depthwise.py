"""CPU template for depthwise_conv2d (NCHW, channel multiplier m).

Channels are independent, so parallelism comes from (n, channel blocks, row blocks) and
register reuse from a (rows x columns) accumulator tile vectorised along output columns, with
the R x S window unrollable and the zero padding inlined or materialised once.
"""
from __future__ import annotations

from autotune.ops import Workload
from autotune.schedule.definitions import depthwise_graph
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.common import (nearest_split, parallel_outer,
                                                 register_tile_limit, vector_width)
from autotune.schedule.templates.cpu_conv2d import schedule_pad
from autotune.space import Annotate, Choice, Config, ConfigSpace, Reorder, Split
from autotune.target import Target

ORDERS = [("c0", "y0", "x0", "c1", "y1", "x1"), ("c0", "c1", "y0", "x0", "y1", "x1"),
          ("c0", "y0", "c1", "x0", "y1", "x1"), ("y0", "c0", "x0", "c1", "y1", "x1")]
MAX_REG_TILE = 256


def space(wl: Workload, target: Target) -> ConfigSpace:
    lanes = target.vector_lanes
    channels = wl.output_shape[1]
    knobs = [
        Split("tile_c", channels, 3, max_inner=4),
        Split("tile_y", wl.out_h, 3, max_inner=8),
        Split("tile_x", wl.out_w, 3, max_inner=4 * lanes),
        Reorder("order", ORDERS),
        Choice("pad", ["inline", "buffer"]),
        Annotate("unroll_rs", ["none", "unroll"]),
        Choice("rs_inner", [False, True]),
        Choice("parallel", [1, 2, 3]),
    ]
    default = {
        "tile_c": nearest_split(knobs[0], (1, 1)),
        "tile_y": nearest_split(knobs[1], (1, 4)),
        "tile_x": nearest_split(knobs[2], (1, 2 * lanes)),
        "order": ORDERS[0],
        "pad": "buffer",
        "unroll_rs": "unroll",
        "rs_inner": False,
        "parallel": 2,
    }
    return ConfigSpace(knobs, default=default, validity=register_tile_limit(("tile_c", "tile_y", "tile_x"), MAX_REG_TILE), name="cpu_depthwise_conv2d")


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    g = depthwise_graph(wl)
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
    # window outside the tile keeps accumulators live across taps; inside reuses a loaded row
    order = [*spatial[:-2], rr, rs, *spatial[-2:]] if cfg["rs_inner"] else [rr, rs, *spatial]
    out.reorder(*order)
    for a in spatial[:-1]:
        out.unroll(a)
    out.vectorize(spatial[-1])
    if cfg["unroll_rs"] == "unroll":
        out.unroll(rr)
        out.unroll(rs)
    return s
