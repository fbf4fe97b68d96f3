"""CUDA template for matmul and batch_matmul.

Rows and columns are tiled block / vthread / thread / inner; each thread accumulates a
register tile (cache_write "local") over a split k; per outer k step the block copies its
A and B tiles into shared memory cooperatively. The batch axis is bound to blockIdx.z.
"""
from __future__ import annotations

from itertools import permutations
from typing import Any, Mapping

from autotune.ops import Workload
from autotune.schedule.definitions import batch_matmul_graph, matmul_graph
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.common import nearest_split
from autotune.schedule.templates.cuda_common import (
    UNROLL_STEPS,
    BlockShape,
    cooperative_fill,
    launch_reason,
    limits,
    span,
    unroll_inner,
)
from autotune.schedule.templates.cuda_occupancy import OperandAxis, first_valid, ranked_tiles
from autotune.space import Choice, Config, ConfigSpace, Knob, Reorder, Split
from autotune.target import Target

INNER_ORDERS = list(permutations(("k", "i", "j")))


def space(wl: Workload, target: Target) -> ConfigSpace:
    M, N, K = wl.dim("M"), wl.dim("N"), wl.dim("K")
    tile_i, tile_j = Split("tile_i", M, 4, max_inner=8), Split("tile_j", N, 4, max_inner=8)
    tile_k = Split("tile_k", K, 2, max_inner=32)
    knobs: list[Knob] = [tile_i, tile_j, tile_k, Reorder("order_inner", INNER_ORDERS),
             Choice("auto_unroll_max_step", list(UNROLL_STEPS))]
    lim = limits(target)

    def validity(cfg: Mapping[str, Any]) -> str | None:
        return launch_reason(lim, block_shape(wl, cfg))

    # A's rows follow the row tile, B's contiguous columns the column tile
    ranked = ranked_tiles((tile_i, tile_j), dims=(1, 0),
                          operands=((OperandAxis(0),), (OperandAxis(1, contiguous=True),)),
                          reduction=K, grid=wl.dim("B") if wl.op == "batch_matmul" else 1,
                          lim=lim)
    k_tiles = list(dict.fromkeys(nearest_split(tile_k, (n,)) for n in (8, 4, 2, 1)))
    default = first_valid(validity, (
        {"tile_i": i, "tile_j": j, "tile_k": k, "order_inner": ("k", "i", "j"),
         "auto_unroll_max_step": 64} for i, j in ranked for k in k_tiles))

    return ConfigSpace(knobs, default=default, validity=validity, name=f"cuda_{wl.op}")


def block_shape(wl: Workload, cfg: Mapping[str, Any]) -> BlockShape:
    """Threads, vthreads, shared tiles (A and B per k step) and register tile of ``cfg``."""
    ti, tj, tk = cfg["tile_i"], cfg["tile_j"], cfg["tile_k"]
    return BlockShape(threads=(tj[2], ti[2], 1), vthreads=ti[1] * tj[1],
                      shared_tiles=(tk[1] * span(ti), tk[1] * span(tj)),
                      local_floats=ti[1] * ti[3] * tj[1] * tj[3])


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    ti, tj, tk = cfg["tile_i"], cfg["tile_j"], cfg["tile_k"]
    batched = wl.op == "batch_matmul"
    g = (batch_matmul_graph if batched else matmul_graph)(wl)
    s = g.schedule()
    A, B = g.inputs[0], g.inputs[1]
    local = s.cache_write(g.output, "local")
    a_sh = s.cache_read(A, "shared", [local])
    b_sh = s.cache_read(B, "shared", [local])

    st = s[g.output]
    *b, i, j = st.axis
    bi, vi, ti_, ii = st.tile(i, ti)
    bj, vj, tj_, ij = st.tile(j, tj)
    st.reorder(*b, bi, bj, ti_, tj_, vi, vj, ii, ij)
    if b:
        st.bind(b[0], "blockIdx.z")
    st.bind(bi, "blockIdx.y")
    st.bind(bj, "blockIdx.x")
    st.bind(ti_, "threadIdx.y")
    st.bind(tj_, "threadIdx.x")
    st.bind(vi, "vthread")
    st.bind(vj, "vthread")

    st.unroll(ii)  # the register tile is indexed by constants only when fully unrolled
    st.unroll(ij)

    local.compute_at(st, tj_)
    lvi, lvj, li, lj = local.axis
    ko, ki = local.split(local.reduce_axis[0], factor=tk[1])
    groups = {"k": [ki], "i": [lvi, li], "j": [lvj, lj]}
    sizes = {ki: tk[1], lvi: ti[1], li: ti[3], lvj: tj[1], lj: tj[3]}
    order = [a for n in cfg["order_inner"] for a in groups[n]]
    local.reorder(ko, *order)
    for a in (lvi, li, lvj, lj):
        local.unroll(a)
    unroll_inner(local, order, [sizes[a] for a in order], cfg["auto_unroll_max_step"])

    threads = (tj[2], ti[2], 1)
    for fill in (a_sh, b_sh):
        fill.compute_at(local, ko)
        cooperative_fill(fill, threads)
    return s
