"""CUDA template for depthwise_conv2d (NCHW, channel multiplier, fused epilogue).

The seed schedule made tunable: batch and channel share blockIdx.z, each block computes
a tile of one output plane with num_thread_y x num_thread_x threads (num_vthread_x
virtual threads interleave columns), each thread a small register tile of rows and
columns. The block's input tile (padding inlined) and the channel's filter are copied
into shared memory first; the scale_shift/bias + relu epilogue runs in the write-back.

In float16 or bfloat16 the arguments hold the half type (half the global traffic of
float32); the fills widen each element once into float32 shared tiles, so the inner loop is
float32 multiply-adds without conversions (widening at every product, or half2 products,
would put a conversion beside each FMA), accumulated in float32 registers; the result,
epilogue applied, is rounded once when stored.
"""
from __future__ import annotations

from autotune.ops import Workload
from autotune.schedule.definitions import depthwise_graph
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.cuda_common import (
    UNROLL_STEPS,
    BlockShape,
    clamped_span,
    conv_caches,
    cooperative_fill,
    launch_reason,
    limits,
    unroll_inner,
)
from autotune.space import Choice, Config, ConfigSpace
from autotune.target import Target


def space(wl: Workload, target: Target) -> ConfigSpace:
    oh, ow = wl.out_h, wl.out_w
    knobs = [
        Choice("num_thread_y", [1, 2, 4, 8, 16, 32]),
        Choice("num_thread_x", [1, 2, 4, 8, 16, 32, 64]),
        Choice("num_vthread_x", [1, 2, 4]),
        Choice("tile_yi", [1, 2, 4]),
        Choice("tile_xi", [1, 2, 4]),
        Choice("auto_unroll_max_step", list(UNROLL_STEPS)),
    ]
    default = {"num_thread_y": min(8, _pow2_floor(oh)), "num_thread_x": min(32, _pow2_floor(ow)),
               "num_vthread_x": 1, "tile_yi": 1, "tile_xi": 1, "auto_unroll_max_step": 64}
    lim = limits(target)
    blocks_z = wl.dim("N") * wl.channels

    def validity(cfg: Config) -> str | None:
        span_y = cfg["num_thread_y"] * cfg["tile_yi"]
        span_x = cfg["num_vthread_x"] * cfg["num_thread_x"] * cfg["tile_xi"]
        # a tile twice the axis or more only repeats a smaller config with idle threads
        if span_y >= 2 * oh and span_y > 1:
            return f"tile of {span_y} rows for {oh} output rows"
        if span_x >= 2 * ow and span_x > 1:
            return f"tile of {span_x} columns for {ow} output columns"
        if blocks_z > lim.max_grid_dim[2]:
            return f"{blocks_z} batch x channel blocks > grid limit {lim.max_grid_dim[2]}"
        return launch_reason(lim, block_shape(wl, cfg))

    return ConfigSpace(knobs, default=default, validity=validity, name="cuda_depthwise_conv2d")


def block_shape(wl: Workload, cfg: Config) -> BlockShape:
    """Threads, vthreads, shared tiles (input window and the channel's filter) and register
    tile of ``cfg``; tiles wider than the output are clamped as lowering clamps them."""
    (sh, sw), R, S = wl.pair("stride"), wl.dim("R"), wl.dim("S")
    ty, yi = cfg["num_thread_y"], cfg["tile_yi"]
    vx, tx, xi = cfg["num_vthread_x"], cfg["num_thread_x"], cfg["tile_xi"]
    rows = (clamped_span(wl.out_h, (ty, yi)) - 1) * sh + R
    cols = (clamped_span(wl.out_w, (vx, tx, xi)) - 1) * sw + S
    return BlockShape(threads=(tx, ty, 1), vthreads=vx, shared_tiles=(rows * cols, R * S),
                      local_floats=vx * yi * xi)


def _pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    ty, yi = cfg["num_thread_y"], cfg["tile_yi"]
    vx, tx, xi = cfg["num_vthread_x"], cfg["num_thread_x"], cfg["tile_xi"]
    g = depthwise_graph(wl)
    s, local, d_sh, w_sh = conv_caches(g)

    st = s[g.output]
    n, c, y, x = st.axis
    by, ty_, yi_ = st.tile(y, (1, ty, yi))
    bx, vx_, tx_, xi_ = st.tile(x, (1, vx, tx, xi))
    st.reorder(n, c, by, bx, ty_, tx_, vx_, yi_, xi_)
    st.bind(st.fuse(n, c), "blockIdx.z")
    st.bind(by, "blockIdx.y")
    st.bind(bx, "blockIdx.x")
    st.bind(ty_, "threadIdx.y")
    st.bind(tx_, "threadIdx.x")
    st.bind(vx_, "vthread")
    st.unroll(yi_)
    st.unroll(xi_)

    local.compute_at(st, tx_)
    spatial = list(local.axis)  # mirrors of vx, yi, xi
    rr, rs = local.reduce_axis
    outer, rri = local.split(rr, nparts=1)  # a one-trip loop to attach the fills to
    local.reorder(outer, rri, rs, *spatial)
    for a in spatial:
        local.unroll(a)
    unroll_inner(local, [rri, rs, *spatial], [wl.dim("R"), wl.dim("S"), vx, yi, xi],
                 cfg["auto_unroll_max_step"])
    for fill in (d_sh, w_sh):
        fill.compute_at(local, outer)
        cooperative_fill(fill, (tx, ty, 1))
    return s
