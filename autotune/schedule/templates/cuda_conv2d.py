"""CUDA template for conv2d (NCHW, with padding, stride, dilation and fused epilogue).

Output channels, rows and columns are tiled block / vthread / thread / inner (threads
z, y, x); batch and the channel block share blockIdx.z. Each thread accumulates a
register tile over the reduction split into outer and inner parts (rc, ry, rx); per
outer step the block copies its input and weight tiles into shared memory. The padded
input is inlined into the input tile's fill, so padding costs no extra pass.
"""
from __future__ import annotations

from itertools import permutations
from typing import Any, Mapping

from autotune.ops import Workload
from autotune.schedule.definitions import conv2d_graph, conv_groups
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.common import nearest_split
from autotune.schedule.templates.cuda_common import (
    UNROLL_STEPS,
    BlockShape,
    conv_caches,
    cooperative_fill,
    launch_reason,
    limits,
    span,
    unroll_inner,
)
from autotune.schedule.templates.cuda_occupancy import OperandAxis, first_valid, ranked_tiles
from autotune.space import Choice, Config, ConfigSpace, Knob, Reorder, Split
from autotune.target import Target

INNER_ORDERS = list(permutations(("rc", "ry", "rx")))


def space(wl: Workload, target: Target) -> ConfigSpace:
    _, images, C, K = conv_groups(wl)  # per group: a grouped conv is a conv over N*G images
    R, S = wl.dim("R"), wl.dim("S")
    splits = [
        Split("tile_f", K, 4, max_inner=8),
        Split("tile_y", wl.out_h, 4, max_inner=4),
        Split("tile_x", wl.out_w, 4, max_inner=4),
        # a reduction tile need not divide its extent: lowering guards the tail's loads
        Split("tile_rc", C, 2, max_inner=16),
        Split("tile_ry", R, 2),
        Split("tile_rx", S, 2),
    ]
    knobs: list[Knob] = [*splits, Reorder("order_inner", INNER_ORDERS),
             Choice("auto_unroll_max_step", list(UNROLL_STEPS))]
    lim = limits(target)

    def validity(cfg: Mapping[str, Any]) -> str | None:
        return launch_reason(lim, block_shape(wl, cfg))

    fixed = {
        "tile_ry": nearest_split(splits[4], (R,)),
        "tile_rx": nearest_split(splits[5], (S,)),
        "order_inner": ("rc", "ry", "rx"),
        "auto_unroll_max_step": 512,
    }
    # the weights are indexed by the channel tile, the input by the row and column tiles
    (sh, sw), (dh, dw) = wl.pair("stride"), wl.pair("dilation")
    rows = OperandAxis(1, sh, (R - 1) * dh + 1, R)
    cols = OperandAxis(2, sw, (S - 1) * dw + 1, S, contiguous=True)
    ranked = ranked_tiles(splits[:3], dims=(2, 1, 0), operands=((OperandAxis(0),), (rows, cols)),
                          reduction=C * R * S, grid=images, lim=lim)
    # distinct: a short channel axis maps several of them to one tile
    rc_tiles = list(dict.fromkeys(nearest_split(splits[3], (n,)) for n in (8, 4, 2, 1)))
    default = first_valid(validity, ({"tile_f": f, "tile_y": y, "tile_x": x, "tile_rc": rc}
                                     | fixed for f, y, x in ranked for rc in rc_tiles))
    return ConfigSpace(knobs, default=default, validity=validity, name="cuda_conv2d")


def block_shape(wl: Workload, cfg: Mapping[str, Any]) -> BlockShape:
    """Threads, vthreads, shared tiles (input window and weights per reduction step) and
    register tile of ``cfg``."""
    (sh, sw), (dh, dw) = wl.pair("stride"), wl.pair("dilation")
    tf, ty, tx = cfg["tile_f"], cfg["tile_y"], cfg["tile_x"]
    rc, ry, rx = cfg["tile_rc"][1], cfg["tile_ry"][1], cfg["tile_rx"][1]
    rows = (span(ty) - 1) * sh + (ry - 1) * dh + 1
    cols = (span(tx) - 1) * sw + (rx - 1) * dw + 1
    return BlockShape(threads=(tx[2], ty[2], tf[2]), vthreads=tf[1] * ty[1] * tx[1],
                      shared_tiles=(rc * rows * cols, span(tf) * rc * ry * rx),
                      local_floats=tf[1] * tf[3] * ty[1] * ty[3] * tx[1] * tx[3])


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    tf, ty, tx = cfg["tile_f"], cfg["tile_y"], cfg["tile_x"]
    g = conv2d_graph(wl)
    s, local, d_sh, w_sh = conv_caches(g)

    st = s[g.output]
    n, f, y, x = st.axis
    bf, vf, tf_, fi = st.tile(f, tf)
    by, vy, ty_, yi = st.tile(y, ty)
    bx, vx, tx_, xi = st.tile(x, tx)
    st.reorder(n, bf, by, bx, tf_, ty_, tx_, vf, vy, vx, fi, yi, xi)
    st.bind(st.fuse(n, bf), "blockIdx.z")
    st.bind(by, "blockIdx.y")
    st.bind(bx, "blockIdx.x")
    for a, tag in ((tf_, "threadIdx.z"), (ty_, "threadIdx.y"), (tx_, "threadIdx.x")):
        st.bind(a, tag)
    for a in (vf, vy, vx):
        st.bind(a, "vthread")
    for a in (fi, yi, xi):
        st.unroll(a)  # the register tile is indexed by constants only when fully unrolled

    local.compute_at(st, tx_)
    spatial = list(local.axis)  # mirrors of vf, vy, vx, fi, yi, xi
    rc, ry, rx = local.reduce_axis
    rco, rci = local.split(rc, factor=cfg["tile_rc"][1])
    ryo, ryi = local.split(ry, factor=cfg["tile_ry"][1])
    rxo, rxi = local.split(rx, factor=cfg["tile_rx"][1])
    inner = {"rc": rci, "ry": ryi, "rx": rxi}
    order = [inner[k] for k in cfg["order_inner"]] + spatial
    local.reorder(rco, ryo, rxo, *order)
    for a in spatial:
        local.unroll(a)
    sizes = {rci: cfg["tile_rc"][1], ryi: cfg["tile_ry"][1], rxi: cfg["tile_rx"][1]}
    sizes.update(zip(spatial, (tf[1], ty[1], tx[1], tf[3], ty[3], tx[3])))
    unroll_inner(local, order, [sizes[a] for a in order], cfg["auto_unroll_max_step"])

    threads = (tx[2], ty[2], tf[2])
    for fill in (d_sh, w_sh):
        fill.compute_at(local, rxo)
        cooperative_fill(fill, threads)
    return s
