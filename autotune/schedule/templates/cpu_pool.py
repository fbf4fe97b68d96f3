"""CPU template for max_pool2d and avg_pool2d (NCHW; a blocked layout takes the
`cpu_window_blocked` variant).

Channels are independent, so parallelism comes from (n, channel blocks, row blocks) and
the work per task from a (rows x columns) tile of running maxima (or sums) vectorised along
output columns, with the R x S window unrollable and the padding inlined or materialised.
"""
from __future__ import annotations

from typing import Any

from autotune.ops import Workload
from autotune.schedule.definitions import pool2d_graph
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.common import (
    MAX_UNROLLED,
    innermost_factors,
    nearest_split,
    parallel_levels,
    vector_registers,
)
from autotune.schedule.templates.cpu_depthwise import (
    ORDERS,
    schedule_window,
    window_knobs,
    window_validity,
)
from autotune.space import Config, ConfigSpace
from autotune.target import Target
from autotune.target.cpu_facts import CpuFacts, facts_of

MAX_DEFAULT_ROWS = 8


def space(wl: Workload, target: Target) -> ConfigSpace:
    knobs = window_knobs(wl, wl.dim("C"), target.vector_lanes)
    return ConfigSpace(knobs, default=default_values(wl, facts_of(target), knobs),
                       validity=window_validity(wl, target), name=f"cpu_{wl.op}")


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
    return schedule_window(pool2d_graph(wl), target, cfg)
