"""CPU template for matmul and batch_matmul.

Three-level tiling of i and j (cache block / tile loop / register tile), a register-tile
accumulator (cache_write "local") computed inside the innermost tile loop over a split k,
the register tile's columns vectorised and its rows unrolled, B optionally packed into
panels as wide as the register tile, outer loops fused into one parallel loop.
"""
from __future__ import annotations

from autotune.ops import Workload
from autotune.schedule.definitions import batch_matmul_graph, matmul_graph
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.common import nearest_split, parallel_outer, vector_width
from autotune.space import Annotate, Choice, Config, ConfigSpace, Reorder, Split
from autotune.target import Target

ORDERS = [("i0", "j0", "i1", "j1"), ("i0", "j0", "j1", "i1"),
          ("j0", "i0", "i1", "j1"), ("j0", "i0", "j1", "i1")]


def space(wl: Workload, target: Target) -> ConfigSpace:
    p = wl.params
    M, N, K = p["M"], p["N"], p["K"]
    lanes = target.vector_lanes
    knobs = [
        Split("tile_i", M, 3, max_inner=16),
        Split("tile_j", N, 3, max_inner=4 * lanes, inner_multiple_of=lanes),
        Split("tile_k", K, 2, max_inner=16),
        Reorder("order", ORDERS),
        Choice("pack_b", [True, False]),
        Annotate("unroll_k", ["none", "unroll"]),
        Choice("parallel", [1, 2]),
    ]
    default = {
        "tile_i": nearest_split(knobs[0], (4, 8)),
        "tile_j": nearest_split(knobs[1], (8, 2 * lanes)),
        "tile_k": nearest_split(knobs[2], (4,)),
        "order": ("j0", "i0", "j1", "i1"),
        "pack_b": True,
        "unroll_k": "unroll",
        "parallel": 2,
    }
    return ConfigSpace(knobs, default=default, name=f"cpu_{wl.op}")


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    ti, tj, tk = cfg["tile_i"], cfg["tile_j"], cfg["tile_k"]
    reg_j = tj[2]
    batched = wl.op == "batch_matmul"
    build = batch_matmul_graph if batched else matmul_graph
    g = build(wl, pack=reg_j if cfg["pack_b"] else None)
    s = g.schedule()
    out = s.cache_write(g.output, "local")
    st = s[g.output]
    *b, i, j = st.axis
    i0, i1, i2 = st.tile(i, ti)
    j0, j1, j2 = st.tile(j, tj)
    v = vector_width(reg_j, target.vector_lanes)
    j2o, j2v = st.split(j2, factor=v)
    names = {"i0": i0, "j0": j0, "i1": i1, "j1": j1}
    outer = [*b, *(names[n] for n in cfg["order"])]
    st.reorder(*outer, i2, j2o, j2v)
    st.vectorize(j2v)
    parallel_outer(st, outer, cfg["parallel"] + len(b))

    out.compute_at(st, outer[-1])
    ri, rjo, rjv = out.axis
    k0, k1 = out.tile(out.reduce_axis[0], tk)
    out.reorder(k0, k1, ri, rjo, rjv)
    out.unroll(ri)
    out.unroll(rjo)
    out.vectorize(rjv)
    if cfg["unroll_k"] == "unroll":
        out.unroll(k1)

    if g.packed is not None:
        ps = s[g.packed]
        *pb, jo, _, ji = ps.axis
        parallel_outer(ps, [*pb, jo], len(pb) + 1)
        jio, jiv = ps.split(ji, factor=v)
        ps.vectorize(jiv)
    return s
