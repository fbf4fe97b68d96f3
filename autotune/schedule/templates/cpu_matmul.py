"""CPU template for matmul and batch_matmul.

Three-level tiling of i and j (cache block / tile loop / register tile), a register-tile
accumulator (cache_write "local") computed inside the innermost tile loop over a split k,
the register tile's columns vectorised (512- or 256-bit) and its rows unrolled, B and A
optionally packed into panels as wide as the register tile, outer loops fused into one
parallel loop.
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
        Choice("pack_a", [False, True]),
        Annotate("unroll_k", ["none", "unroll"]),
        Choice("reduce_order", ["k0 k1 i j", "k0 i k1 j"]),
        Choice("vector_bits", sorted({target.vector_bits, min(256, target.vector_bits)},
                                     reverse=True)),
        Choice("parallel", [1, 2]),
    ]
    default = {
        "tile_i": nearest_split(knobs[0], (4, 8)),
        "tile_j": nearest_split(knobs[1], (8, 2 * lanes)),
        "tile_k": nearest_split(knobs[2], (4,)),
        "order": ("j0", "i0", "j1", "i1"),
        "pack_b": True,
        "pack_a": False,
        "unroll_k": "unroll",
        "reduce_order": "k0 k1 i j",
        "vector_bits": target.vector_bits,
        "parallel": 2,
    }
    return ConfigSpace(knobs, default=default, name=f"cpu_{wl.op}")


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    ti, tj, tk = cfg["tile_i"], cfg["tile_j"], cfg["tile_k"]
    reg_j = tj[2]
    build = batch_matmul_graph if wl.op == "batch_matmul" else matmul_graph
    g = build(wl, pack=reg_j if cfg["pack_b"] else None,
              pack_a=ti[2] if cfg["pack_a"] else None)
    s = g.schedule()
    out = s.cache_write(g.output, "local")
    st = s[g.output]
    *b, i, j = st.axis
    i0, i1, i2 = st.tile(i, ti)
    j0, j1, j2 = st.tile(j, tj)
    v = vector_width(reg_j, cfg["vector_bits"] // 32)
    j2o, j2v = st.split(j2, factor=v)
    names = {"i0": i0, "j0": j0, "i1": i1, "j1": j1}
    outer = [*b, *(names[n] for n in cfg["order"])]
    st.reorder(*outer, i2, j2o, j2v)
    st.vectorize(j2v)
    parallel_outer(st, outer, cfg["parallel"] + len(b))

    out.compute_at(st, outer[-1])
    ri, rjo, rjv = out.axis
    k0, k1 = out.tile(out.reduce_axis[0], tk)
    if cfg["reduce_order"] == "k0 k1 i j":
        out.reorder(k0, k1, ri, rjo, rjv)
    else:  # k1 between rows and columns: one row of A stays in a register across k1 steps
        out.reorder(k0, ri, k1, rjo, rjv)
    out.unroll(ri)
    out.unroll(rjo)
    out.vectorize(rjv)
    if cfg["unroll_k"] == "unroll":
        out.unroll(k1)

    for t in g.temps:  # packed panels: parallel over panels, contiguous inner axis vectorised
        ps = s[t]
        *pb, po, _, pi = ps.axis
        parallel_outer(ps, [*pb, po], len(pb) + 1)
        _, piv = ps.split(pi, factor=vector_width(ps.tensor.shape[-1], cfg["vector_bits"] // 32))
        ps.vectorize(piv)
    return s
