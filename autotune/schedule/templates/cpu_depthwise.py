"""CPU template for depthwise_conv2d (NCHW, channel multiplier m; a blocked layout takes
the `cpu_window_blocked` variant).

Channels are independent, so parallelism comes from (n, channel blocks, row blocks) and
register reuse from a (rows x columns) accumulator tile vectorised along output columns, with
the R x S window unrollable and the zero padding inlined or materialised once.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable

from autotune.ops import Workload
from autotune.schedule.definitions import OpGraph, depthwise_graph
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.common import (
    MAX_UNROLLED,
    WINDOW_ORDERS,
    all_of,
    fit_count,
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
from autotune.schedule.templates.cpu_conv2d import schedule_pad
from autotune.space import Annotate, Choice, Config, ConfigSpace, Knob, Reorder, Split
from autotune.target import Target
from autotune.target.cpu_facts import CpuFacts, facts_of

ORDERS = WINDOW_ORDERS
MAX_REG_TILE = 256
# Register tile rows at a stride along y: consecutive output rows share few input rows (one
# of three taps at stride 2), so a tall tile reuses little and gathers more. MobileNet-V2's
# 96 channels 112x112 stride 2, one core, AVX-512: 8 rows 495 us, 4 rows 419, 2 rows 256.
MAX_STRIDED_ROWS = 2


def space(wl: Workload, target: Target) -> ConfigSpace:
    knobs = window_knobs(wl, wl.output_shape[1], target.vector_lanes)
    facts = facts_of(target)
    default = default_values(wl, facts, knobs)
    return ConfigSpace(knobs, default=default, validity=window_validity(wl, target),
                       name="cpu_depthwise_conv2d")


def window_knobs(wl: Workload, channels: int, lanes: int) -> list[Knob]:
    """The knobs of a per-channel R x S window op (this template's, and the pools'): tiles
    of channels, output rows and columns, their order, padding, the window's unroll and
    place, and the parallel levels."""
    return [
        Split("tile_c", channels, 3, max_inner=4),
        Split("tile_y", wl.out_h, 3, max_inner=8),
        Split("tile_x", wl.out_w, 3, max_inner=4 * lanes),
        Reorder("order", ORDERS),
        Choice("pad", ["inline", "buffer"]),
        Annotate("unroll_rs", ["none", "unroll"]),
        Choice("rs_inner", [False, True]),
        Choice("parallel", [1, 2, 3]),
    ]


def window_validity(wl: Workload, target: Target) -> Callable[[Config], str | None]:
    """A window op's register tile and unrolled window within the target's registers."""
    lanes = target.vector_lanes
    return all_of(register_tile_limit(("tile_c", "tile_y", "tile_x"), MAX_REG_TILE),
                  unroll_limit(partial(unrolled_step, lanes, wl.dim("R") * wl.dim("S")),
                               facts_of(target).vector_registers))


def unrolled_step(lanes: int, taps: int, cfg: Config) -> tuple[int, int]:
    """(accumulator registers, unrolled taps): channels x rows x the columns' vectors, and
    the R x S window when it is unrolled."""
    acc = cfg["tile_c"][2] * cfg["tile_y"][2] * vector_registers(cfg["tile_x"][2], lanes)
    return acc, taps if cfg["unroll_rs"] == "unroll" else 1


def default_values(wl: Workload, facts: CpuFacts, knobs: list[Any]) -> dict[str, Any]:
    """Default from the CPU's facts: register tile of y2 rows x x2 columns (one channel:
    channels share nothing) by `register_tile`, full vectors with a tail where stores mask
    natively (AVX-512); when strided, at most one vector of inputs wide and
    `MAX_STRIDED_ROWS` tall; y1 row tiles whose input rows fit half of L1 (rows are reused
    across the R taps); whole rows per tile; outer loops fused until every core has 4+
    tasks. Padding is inlined (a guarded load) rather than materialised: the extra pass
    over the input cost more than the guards (56x56 on AVX-512: 67 -> 103 GFLOP/s)."""
    tile_c, tile_y, tile_x = knobs[0], knobs[1], knobs[2]
    sy, sx = wl.pair("stride")
    tail = facts.lanes if facts.vector_bits >= 512 and sx == 1 else 0
    columns = strided_columns(innermost_factors(tile_x, tail), facts.lanes, sx)
    rows = innermost_factors(tile_y)
    short = [y for y in rows if y <= MAX_STRIDED_ROWS]
    if sy > 1 and len(short) > 1:  # not one row alone: 576 channels 7x7, 1 row 32 us, 7 20
        rows = short
    y2, x2 = register_tile(facts, [((y, x), y, x, tail_use(wl.out_h, y) * tail_use(wl.out_w, x))
                                   for y in rows for x in columns])
    in_w = wl.out_w * sx + wl.dim("S")  # input row width, about (a dilated window is wider)
    y1 = fit_count(facts.l1d // 2, (y2 * sy + wl.dim("R")) * in_w * 4, wl.out_h // y2)
    tc = nearest_split(tile_c, (1, 1))
    ty = nearest_split(tile_y, (y1, y2))
    return {
        "tile_c": tc,
        "tile_y": ty,
        "tile_x": nearest_split(tile_x, (-(-wl.out_w // x2), x2)),
        "order": ORDERS[0],
        "pad": "inline",
        # a wide window unrolled over the tile would exceed `unroll_limit`: a loop then
        "unroll_rs": "unroll" if y2 * vector_registers(x2, facts.lanes) * wl.dim("R")
        * wl.dim("S") <= MAX_UNROLLED else "none",
        "rs_inner": False,
        "parallel": parallel_levels([wl.dim("N") * tc[0], ty[0], 1], facts, 3),
    }


def strided_columns(factors: list[int], lanes: int, stride: int) -> list[int]:
    """The register tile's column counts for a stride along x: a row of outputs reads every
    ``stride``-th input, a gather, so the tile spans at most one vector of inputs (lanes /
    stride columns). MobileNet-V2's 96 channels 112x112 stride 2, one core, AVX-512: 8 x 32
    ran 2282 us, 8 x 8 495 us."""
    narrow = [f for f in factors if f <= lanes // stride]
    # not one column alone: 576 channels 7x7 on AVX2, 1 column ran 65 us, 7 columns 23
    return narrow if stride > 1 and len(narrow) > 1 else factors


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    return schedule_window(depthwise_graph(wl), target, cfg)


def schedule_window(g: OpGraph, target: Target, cfg: Config) -> Schedule:
    """A window op's graph (depthwise or max-pool) scheduled by a config of `window_knobs`."""
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
    schedule_window_taps(out, cfg)  # with the window inside the tile, a loaded row is reused
    return s
