"""CPU template for conv2d in a channel-blocked layout (NCHW[x]c; the data may be in
another block, or NCHW: a model's first conv).

A vector of x output channels is contiguous in the output (and a residual), and the weight
is packed to [K/x, C/y, R, S, y(c), x(k)] (y: the data's block): the register tile is output
pixels (y2 x x2)
by k2 channel blocks, each step broadcasting one input value per pixel and loading k2
weight vectors, and the write-back stores whole vectors (oneDNN's nChw16c direct conv).
Output channel blocks, rows and columns are tiled in three levels; the reduction runs over
input channel blocks (split), then the (unrollable) R x S taps and the channels of a
block, in either order.
"""
from __future__ import annotations

import math
from functools import partial
from typing import Any, Sequence

from autotune.ops import Workload
from autotune.schedule.definitions import conv2d_blocked_graph, conv_groups
from autotune.schedule.schedule import Schedule, Stage
from autotune.schedule.templates.common import (
    ACCUMULATOR_REGISTERS_FACTOR,
    CONV_ORDERS,
    MAX_CONV_REG_TILE,
    MAX_UNROLLED,
    all_of,
    fit_count,
    innermost_factors,
    nearest_split,
    parallel_levels,
    parallel_outer,
    register_tile,
    tail_use,
    unroll_limit,
    vector_registers,
    vector_width,
)
from autotune.space import Annotate, Choice, Config, ConfigSpace, Knob, Reorder, Split
from autotune.target import Target
from autotune.target.cpu_facts import CpuFacts, facts_of

ORDERS = CONV_ORDERS
MAX_REG_TILE = MAX_CONV_REG_TILE
MAX_TASK_ACCUMULATOR = 16 * 1024  # 64 KiB
# an image of at most this many output pixels has few to spend each weight on (see
# default_values)
FEW_PIXELS = 256
# The most accumulator registers the default's tile may hold (beside `register_tile`'s 3/4
# of the registers). On a 2-core Rocket Lake (32 registers) every blocked conv whose
# default filled 24 ran slower than with the next tile down (18-21), while the matmul's 24
# beat 16 on ViT's layers: Inception-V3's 768 -> 192 1x1, 7x1 and 1x7 convs at 12x12
# 1.34-1.50x, its 288 -> 384 3x3 1.42x, its 64 -> 80 1x1 at 54x54 2.5-5.6x, SqueezeNet
# 1.0's 3x3 and 1x1 convs at 54x54 1.6-3.8x; the models 1.16x (Inception-V3) and 1.25x
# (SqueezeNet 1.0) faster, ResNets unchanged (16). Compiled for Haswell (16 registers,
# 12 -> 11) on that host, the 14x14 1x1 convs of MobileNet-V2 and GoogLeNet lost up to
# 16%, so 3/4 of 16 stays.
MAX_ACCUMULATORS = 22
# The L2 (bytes) from which a Zen core's few-pixel tasks keep a register tile's accumulator
# (see default_values)
ZEN_TILE_L2 = 1024 * 1024


def space(wl: Workload, target: Target) -> ConfigSpace:
    b = wl.block
    _, _, channels, kernels = conv_groups(wl)  # per group (a grouped conv's)
    knobs: list[Knob] = [
        Split("tile_k", kernels // b, 3, max_inner=4),  # channel blocks per tile
        Split("tile_y", wl.out_h, 3, max_inner=8),
        Split("tile_x", wl.out_w, 3, max_inner=16),
        Split("tile_rc", channels // wl.in_block, 2, max_inner=32),
        Reorder("order", ORDERS),
        Choice("pad", ["inline", "buffer"]),
        # taps then a block's channels (innermost: the weight vectors and input values one
        # step reads are contiguous), or channels then taps, as the NCHW template
        Choice("reduce", ["taps_channels", "channels_taps"]),
        Annotate("unroll_rs", ["none", "unroll"]),
        Choice("parallel", [1, 2, 3]),
        # the accumulator of one register tile, the whole reduction inside it; or of a
        # parallel task's whole tile, the input channel blocks' outer split outside its pixels
        Choice("reduce_at", ["tile", "task"]),
    ]
    facts = facts_of(target)
    validity = all_of(partial(_tile_reason, b), partial(_task_reason, b),
                      unroll_limit(partial(unrolled_step, b, target.vector_lanes,
                                           wl.dim("R") * wl.dim("S")),
                                   facts.vector_registers))
    return ConfigSpace(knobs, default=default_values(wl, facts, knobs), validity=validity,
                       name="cpu_conv2d_blocked")


def overhang(extent: int, factors: Sequence[int]) -> int:
    """How far past ``extent`` a loop tiled by ``factors`` (outer count first, as
    `Stage.tile` splits) reaches: a tile's points all run, the guards skipping whole tiles."""
    covered = extent
    for f in reversed(list(factors)[1:]):
        covered = -(-covered // f)
    for f in list(factors)[1:]:
        covered *= f
    return covered - extent


def _tile_reason(block: int, cfg: Config) -> str | None:
    tile = cfg["tile_k"][2] * block * cfg["tile_y"][2] * cfg["tile_x"][2]
    return f"register tile of {tile} floats exceeds {MAX_REG_TILE}" \
        if tile > MAX_REG_TILE else None


def _task_reason(block: int, cfg: Config) -> str | None:
    """A task's accumulator (reduce_at "task") lives on the worker's stack: at most
    MAX_TASK_ACCUMULATOR floats."""
    if cfg["reduce_at"] != "task":
        return None
    floats = task_accumulator(block, cfg)
    return f"task accumulator of {floats} floats exceeds {MAX_TASK_ACCUMULATOR}" \
        if floats > MAX_TASK_ACCUMULATOR else None


def task_accumulator(block: int, cfg: Config) -> int:
    """Floats of a parallel task's output tile: the loops below the fused parallel ones."""
    level = {"k0": cfg["tile_k"][0], "k1": cfg["tile_k"][1], "y0": cfg["tile_y"][0],
             "y1": cfg["tile_y"][1], "x0": cfg["tile_x"][0], "x1": cfg["tile_x"][1]}
    inside = math.prod(level[a] for a in cfg["order"][cfg["parallel"]:])
    return inside * cfg["tile_k"][2] * block * cfg["tile_y"][2] * cfg["tile_x"][2]


def unrolled_step(block: int, lanes: int, taps: int, cfg: Config) -> tuple[int, int]:
    """(accumulator registers, unrolled taps) of one step over an input channel."""
    acc = cfg["tile_k"][2] * cfg["tile_y"][2] * cfg["tile_x"][2] * \
        vector_registers(block, lanes)
    return acc, taps if cfg["unroll_rs"] == "unroll" else 1


def default_values(wl: Workload, facts: CpuFacts, knobs: list[Any]) -> dict[str, Any]:
    """A register tile of (y2 x x2) pixels by k2 channel blocks by `register_tile` (pixels
    broadcast, channel vectors reloaded); input channel blocks so one block's weight and
    input micro-panels fit half of L1; k1 channel-block tiles whose weights fit half of L2
    (or one tile per task where rows give the cores too few); whole rows per tile; outer
    loops fused until every core has 4+ tasks. A grouped conv's sizes are one group's, its
    images N*G."""
    _, images, C, _ = conv_groups(wl)
    b, bi, R, S = wl.block, wl.in_block, wl.dim("R"), wl.dim("S")
    tile_k, tile_y, tile_x, tile_rc = knobs[0], knobs[1], knobs[2], knobs[3]
    # a block narrower than a vector still holds a register of its own: counted as k*b
    # columns, 2 blocks of 8 on 16 lanes looked like one register and 16 pixels of them
    # spilled (MNASNet-1.3's stem, 3 -> 40 channels in NCHW8c, ran 54 GFLOP/s)
    k2, y2, x2 = register_tile(facts, [((k, y, x), y * x, k * max(b, facts.lanes),
                                        tail_use(tile_k.extent, k)
                                        * tail_use(tile_y.extent, y) * tail_use(tile_x.extent, x))
                                       for k in innermost_factors(tile_k)
                                       for y in innermost_factors(tile_y)
                                       for x in innermost_factors(tile_x)],
                               budget=min(3 * facts.vector_registers // 4, MAX_ACCUMULATORS))
    panel = R * S * bi * (k2 * b + (y2 + R - 1) * (x2 + S - 1)) * 4  # one channel block's
    rc1 = fit_count(facts.l1d // 2, panel, C // bi)
    k1 = fit_count(facts.l2 // 2, k2 * b * C * R * S * 4, tile_k.extent // k2)
    tk = nearest_split(tile_k, (k1, k2))
    ty = nearest_split(tile_y, (1, y2))
    tx = nearest_split(tile_x, (-(-wl.out_w // x2), x2))
    reduce_at = "tile"
    pixels = images * wl.out_h * wl.out_w
    fits_l1 = k2 * b * wl.out_h * wl.out_w * 4 <= facts.l1d  # one image's task accumulator
    if 1 < pixels <= FEW_PIXELS and bi > 1 and (tile_k.extent % k2 == 0 or fits_l1) and \
            images * (tile_k.extent // k2) >= 2 * facts.cores:
        # few pixels per weight (ResNet-50's 14x14 and 7x7 layers): a task per channel
        # tile over the whole image, accumulating over it, so each weight panel is used for
        # every pixel as it streams in, not once per row tile. On a 2-core Rocket Lake,
        # with weights cold as a model leaves them, those layers took 5.2 against 6.0 ms
        # (hot: 4.8 against 5.1); its 28x28 and 56x56 layers ran 5 to 40% slower so. Where
        # the channel tiles leave a tail (guarded inside the task's reduction), only with
        # an accumulator that fits L1: RegNet-Y-16GF's 1232 channels at 14x14 (77 blocks in
        # tiles of 4: 50 KB) took 4.3 ms against 2.0; RegNet-Y-400MF's 440 at 7x7 (6 KB)
        # 0.10 against 0.17, its 208 -> 440 at 14x14 (25 KB) 0.19 against 0.33. Not for
        # NCHW data (a block of 1: each channel's plane apart): ShuffleNet-V2 x2.0's 1x1
        # convs of 488 NCHW channels into NCHW8c at 14x14 and 7x7 ran 0.55 against 1.18 ms
        # and 0.15 against 0.31 with a register tile's accumulator instead.
        # On a Zen core with a 1 MiB L2 (Zen 4, Zen 5) the same tasks ran faster with a
        # register tile's accumulator: a channel tile's weights (590 KB at most in the
        # ResNets) stay in its L2 from one pixel tile to the next. On a 2-core Zen 4, timed
        # in the model, those layers took 21.1 against 23.0 ms in ResNet-50, 8.4 against
        # 8.8 in ResNet-18 and 1.53 against 1.68 in MobileNet-V2.
        tk = nearest_split(tile_k, (1, k2))
        ty = nearest_split(tile_y, (-(-wl.out_h // y2), y2))
        reduce_at = "tile" if facts.zen and facts.l2 >= ZEN_TILE_L2 else "task"
    elif images * tk[0] * ty[0] * tx[0] < 4 * facts.cores and wl.out_h * wl.out_w > 1:
        # too few row tiles to balance the cores: a task per channel tile instead, over
        # every pixel (on a 2-core Rocket Lake, ResNet-50's 1x1 convs at 14x14 ran 7 tasks
        # and 1.14-1.21x slower; MobileNet's at 7x7 1.06-1.22x). A 1 x 1 output (an
        # excitation's) stays one task: its few microseconds do not pay for a fork.
        tk = nearest_split(tile_k, (1, k2))
    reduce, unroll = _reduction_order(facts, bi, k2 * y2 * x2 * vector_registers(b, facts.lanes),
                                      R * S)
    return {
        "tile_k": tk,
        "tile_y": ty,
        "tile_x": tx,
        "tile_rc": nearest_split(tile_rc, (rc1,)),
        "order": ORDERS[0],
        "pad": "buffer",
        "reduce": reduce,
        "unroll_rs": unroll,
        "parallel": parallel_levels([images * tk[0], ty[0], tx[0]], facts, 3),
        "reduce_at": reduce_at,
    }


def _reduction_order(facts: CpuFacts, in_block: int, accumulators: int, taps: int
                     ) -> tuple[str, str]:
    """The default ("reduce", "unroll_rs"). On a 2-core Zen 5 (16 lanes, interleaved),
    ResNet-18's 3x3 convs at 64x56x56, 256x14x14 and 512x7x7 took 491, 541 and 475 us
    with the taps outside a block's channels, 499, 588 and 492 channels first with the
    taps unrolled. On a 2-core Rocket Lake (16 lanes) the second way ran ResNet-18's and
    ResNet-50's blocked 3x3 convs 9% faster in all (10.45 against 11.54 ms, 11.33 against
    12.49), and as fast with 8 lanes; a model's first conv (its data NCHW, 49 taps) is
    not faster so, a 1x1 conv has no taps to order, and an unrolled step past
    `unroll_limit`'s bounds is not valid."""
    if facts.zen or in_block == 1 or taps == 1 or \
            accumulators > ACCUMULATOR_REGISTERS_FACTOR * facts.vector_registers or \
            accumulators * taps > MAX_UNROLLED:
        return "taps_channels", "none"
    return "channels_taps", "unroll"


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    v = vector_width(wl.block, target.vector_lanes)
    # a padded copy covers what the tiles past the output's edges read: a prime width's
    # tiles then run unguarded (SqueezeNet's 109-wide stem ran 115 GFLOP/s guarded, a
    # 112-wide one 338); inlined padding keeps its guards (a select on every read else)
    over = (overhang(wl.out_h, cfg["tile_y"]), overhang(wl.out_w, cfg["tile_x"])) \
        if cfg["pad"] == "buffer" else (0, 0)
    g = conv2d_blocked_graph(wl, over)
    s = g.schedule()
    schedule_blocked_pad(s, g.pad, cfg["pad"], target.vector_lanes)
    out = s.cache_write(g.output, "local")
    st = s[g.output]
    n, k, y, x, ki = st.axis
    k0, k1, k2 = st.tile(k, cfg["tile_k"])
    y0, y1, y2 = st.tile(y, cfg["tile_y"])
    x0, x1, x2 = st.tile(x, cfg["tile_x"])
    names = {"k0": k0, "k1": k1, "y0": y0, "y1": y1, "x0": x0, "x1": x1}
    outer = [n, *(names[a] for a in cfg["order"])]
    kio, kiv = st.split(ki, factor=v)
    st.reorder(*outer, k2, y2, x2, kio, kiv)
    task = parallel_outer(st, outer, cfg["parallel"] + 1)
    st.vectorize(kiv)  # the write-back stores whole vectors: channels are contiguous

    rco, rci, rr, rs = out.reduce_axis
    taps_first = cfg["reduce"] == "taps_channels"
    inner_reduce = (rr, rs, rci) if taps_first else (rci, rr, rs)
    if cfg["reduce_at"] == "tile":
        out.compute_at(st, outer[-1])
        rc0, rc1 = out.tile(rco, cfg["tile_rc"])
        out.reorder(rc0, rc1, *inner_reduce, *out.axis)
        tile = out.axis
    else:
        # the accumulator over the task's whole tile, the input channel blocks' outer split
        # outside its pixel and channel tiles: each weight panel brought in is used for every
        # pixel of the task before the next, so streaming cold weights overlaps the work
        out.compute_at(st, task)
        *rest, _, _, _, _, _ = out.axis
        tile = out.axis[len(rest):]
        rc0, rc1 = out.tile(rco, cfg["tile_rc"])
        out.reorder(rc0, *rest, rc1, *inner_reduce, *tile)
    for a in tile[:-1]:
        out.unroll(a)
    out.vectorize(tile[-1])
    if cfg["unroll_rs"] == "unroll":
        out.unroll(rr)
        out.unroll(rs)

    assert g.packed is not None
    ps = s[g.packed]
    ps.parallel(ps.axis[0])
    _, kv = ps.split(ps.axis[-1], factor=v)
    ps.vectorize(kv)
    return s


def schedule_blocked_pad(s: Schedule, pad, mode: str, lanes: int) -> None:
    """Inline the padding of NCHW[x]c data into its readers, or materialise it once (in
    parallel, a vector of channels at a time; along rows for NCHW data, a block of 1)."""
    if pad is None:
        return
    ps: Stage = s[pad]
    if mode == "inline":
        ps.compute_inline()
        return
    n, c, h, w, *ci = ps.axis
    ps.parallel(ps.fuse(n, c))
    if not ci:  # NCHW
        _, wv = ps.split(w, factor=lanes)
        ps.vectorize(wv)
        return
    _, cv = ps.split(ci[0], factor=vector_width(pad.shape[-1], lanes))
    ps.vectorize(cv)
