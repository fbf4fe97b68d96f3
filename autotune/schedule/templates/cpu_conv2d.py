"""CPU template for conv2d in NCHW (a blocked layout has `cpu_conv2d_blocked`).

Three-level tiling of output channels, rows and columns; a register-tile accumulator over
(channels x rows x columns) computed inside the innermost tile loop, vectorised either along
output channels (with the weight packed so a vector of channels is contiguous; the
write-back then walks columns innermost) or along output columns (contiguous in the input
at stride 1); the input's zero padding inlined as a guarded load or materialised once;
reduction over input channels split and (R, S) unrollable.
"""
from __future__ import annotations

from functools import partial
from typing import Any

from autotune.ops import Workload
from autotune.schedule.definitions import conv2d_graph, conv_groups
from autotune.schedule.schedule import Schedule, Stage
from autotune.schedule.templates.common import (
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
    register_tile_limit,
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


def space(wl: Workload, target: Target) -> ConfigSpace:
    lanes = target.vector_lanes
    _, _, channels, kernels = conv_groups(wl)  # per group (a grouped conv's)
    knobs: list[Knob] = [
        Split("tile_k", kernels, 3, max_inner=4 * lanes),
        Split("tile_y", wl.out_h, 3, max_inner=8),
        Split("tile_x", wl.out_w, 3, max_inner=2 * lanes),
        Split("tile_rc", channels, 2, max_inner=32),
        Reorder("order", ORDERS),
        Choice("vec", ["k", "x"]),
        Choice("pack_w", [True, False]),
        Choice("pad", ["inline", "buffer"]),
        Annotate("unroll_rs", ["none", "unroll"]),
        Choice("parallel", [1, 2, 3]),
    ]
    facts = facts_of(target)
    validity = all_of(register_tile_limit(("tile_k", "tile_y", "tile_x"), MAX_REG_TILE),
                      unroll_limit(partial(unrolled_step, lanes, wl.dim("R") * wl.dim("S")),
                                   facts.vector_registers))
    default = default_values(wl, facts, knobs)
    return ConfigSpace(knobs, default=default, validity=validity, name="cpu_conv2d")


def unrolled_step(lanes: int, taps: int, cfg: Config) -> tuple[int, int]:
    """(accumulator registers, unrolled taps) of one step over an input channel: the
    register tile by the vectorised axis, and the R x S window when it is unrolled."""
    k2, y2, x2 = cfg["tile_k"][2], cfg["tile_y"][2], cfg["tile_x"][2]
    acc = y2 * x2 * vector_registers(k2, lanes) if cfg["vec"] == "k" else \
        k2 * y2 * vector_registers(x2, lanes)
    return acc, taps if cfg["unroll_rs"] == "unroll" else 1


def default_values(wl: Workload, facts: CpuFacts, knobs: list[Any]) -> dict[str, Any]:
    """BLIS-style default, vectorised along output channels (weights packed so a vector of
    channels is contiguous): register tile of k2 channels x (y2 x x2) pixels by
    `register_tile` (pixels broadcast, channel vectors reloaded); input channels blocked
    so one block's weight and input micro-panels fit half of L1; k1 channel tiles whose
    weights (k1*k2 x C x R x S) fit half of L2; whole rows per tile; outer loops fused until
    every core has 4+ tasks. A grouped conv's sizes are one group's, its images N*G."""
    _, images, C, K = conv_groups(wl)
    R, S = wl.dim("R"), wl.dim("S")
    tile_k, tile_y, tile_x, tile_rc = knobs[0], knobs[1], knobs[2], knobs[3]
    # a vector of channels with a masked tail where stores mask natively (AVX-512): on a
    # 2-core Rocket Lake ShuffleNet's 122-channel 1x1 conv at 28x28 ran 0.10 ms with 16
    # channels (8 tiles, the last of 10) against 0.63 with the exact 2 (2-lane vectors)
    tail = facts.lanes if facts.vector_bits >= 512 else 0
    k2, y2, x2 = register_tile(facts, [((k, y, x), y * x, k, tail_use(tile_k.extent, k)
                                        * tail_use(tile_y.extent, y) * tail_use(tile_x.extent, x))
                                       for k in innermost_factors(tile_k, tail)
                                       for y in innermost_factors(tile_y)
                                       for x in innermost_factors(tile_x)])
    panel = R * S * (k2 + (y2 + R - 1) * (x2 + S - 1)) * 4  # one input channel's micro-panels
    rc1 = fit_count(facts.l1d // 2, panel, 32)
    k1 = fit_count(facts.l2 // 2, k2 * C * R * S * 4, K // k2)
    tk = nearest_split(tile_k, (k1, k2))
    ty = nearest_split(tile_y, (1, y2))
    tx = nearest_split(tile_x, (-(-wl.out_w // x2), x2))
    return {
        "tile_k": tk,
        "tile_y": ty,
        "tile_x": tx,
        "tile_rc": nearest_split(tile_rc, (rc1,)),
        "order": ORDERS[0],
        "vec": "k",
        "pack_w": True,
        "pad": "buffer",
        # a wide window (7x7) unrolled over the tile would exceed `unroll_limit`: a loop then
        "unroll_rs": "unroll" if y2 * x2 * vector_registers(k2, facts.lanes) * R * S
        <= MAX_UNROLLED else "none",
        "parallel": parallel_levels([images * tk[0], ty[0], tx[0]], facts, 3),
    }


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    lanes = target.vector_lanes
    reg_k = cfg["tile_k"][2]
    vec_k = cfg["vec"] == "k"
    g = conv2d_graph(wl, pack=reg_k if vec_k and cfg["pack_w"] else None)
    s = g.schedule()
    schedule_pad(s, g.pad, cfg["pad"])
    out = s.cache_write(g.output, "local")
    st = s[g.output]
    n, k, y, x = st.axis
    k0, k1, k2 = st.tile(k, cfg["tile_k"])
    y0, y1, y2 = st.tile(y, cfg["tile_y"])
    x0, x1, x2 = st.tile(x, cfg["tile_x"])
    names = {"k0": k0, "k1": k1, "y0": y0, "y1": y1, "x0": x0, "x1": x1}
    outer = [n, *(names[a] for a in cfg["order"])]
    if vec_k:
        v = vector_width(reg_k, lanes)
        ko, kv = st.split(k2, factor=v)
        inner = [y2, x2, ko, kv]
    else:
        v = vector_width(cfg["tile_x"][2], lanes)
        xo, kv = st.split(x2, factor=v)
        inner = [k2, y2, xo, kv]
    st.reorder(*outer, *inner)
    parallel_outer(st, outer, cfg["parallel"] + 1)

    out.compute_at(st, outer[-1])
    rc, rr, rs = out.reduce_axis
    rc0, rc1 = out.tile(rc, cfg["tile_rc"])
    out.reorder(rc0, rc1, rr, rs, *out.axis)
    for a in out.axis[:-1]:
        out.unroll(a)
    out.vectorize(out.axis[-1])
    if cfg["unroll_rs"] == "unroll":
        out.unroll(rr)
        out.unroll(rs)
    if vec_k:
        # The write-back walks output columns innermost, vectorised: contiguous in `out` and
        # in a residual, where channels lie a plane apart (the residual read lane by lane
        # along channels cost 30-40 us on a 64x56x56 3x3 conv of 520 us; along x, ~2).
        # The accumulator keeps its layout: only the write-back's loop order changes.
        st.reorder(y2, ko, kv, x2)
        st.vectorize(x2)
    else:  # already along columns (a 32->192 1x1 conv's write-back: 904 us to 467 vectorised)
        st.vectorize(kv)

    if g.packed is not None:
        ps = s[g.packed]
        *outer_, c_, r_, s_, ki = ps.axis  # (group,) output channel tile
        ps.parallel(ps.fuse(*outer_) if len(outer_) > 1 else outer_[0])
        _, kiv = ps.split(ki, factor=v)
        ps.vectorize(kiv)
    return s


def schedule_pad(s: Schedule, pad, mode: str) -> None:
    """Inline the zero padding into its readers, or materialise it once (in parallel)."""
    if pad is None:
        return
    ps: Stage = s[pad]
    if mode == "inline":
        ps.compute_inline()
        return
    n, c, h, w = ps.axis
    nc = ps.fuse(n, c)
    ps.parallel(nc)
