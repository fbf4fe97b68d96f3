"""CPU template for matmul and batch_matmul.

Three-level tiling of i and j (cache block / tile loop / register tile), a register-tile
accumulator (cache_write "local") computed inside the innermost tile loop over a split k,
the register tile's columns vectorised (512- or 256-bit) and its rows unrolled, B and A
optionally packed into panels as wide as the register tile, outer loops fused into one
parallel loop. A matmul of one row (M = 1) is a GEMV, which has `cpu_gemv`.
"""
from __future__ import annotations

import math
from typing import Any

from autotune.ops import Workload
from autotune.schedule.definitions import batch_matmul_graph, matmul_graph
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.common import (
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

ORDERS = [("i0", "j0", "i1", "j1"), ("i0", "j0", "j1", "i1"),
          ("j0", "i0", "i1", "j1"), ("j0", "i0", "j1", "i1")]


def space(wl: Workload, target: Target) -> ConfigSpace:
    M, N, K = wl.dim("M"), wl.dim("N"), wl.dim("K")
    lanes = target.vector_lanes
    knobs: list[Knob] = [
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
    facts = facts_of(target)
    default = default_values(wl, facts, knobs)
    return ConfigSpace(knobs, default=default, name=f"cpu_{wl.op}",
                       validity=unroll_limit(unrolled_step, facts.vector_registers))


def unrolled_step(cfg: Config) -> tuple[int, int]:
    """(accumulator registers, unrolled k steps): rows x the register tile's vectors of the
    chosen width, and the k1 steps when they are unrolled."""
    acc = cfg["tile_i"][2] * vector_registers(cfg["tile_j"][2], cfg["vector_bits"] // 32)
    return acc, cfg["tile_k"][1] if cfg["unroll_k"] == "unroll" else 1


def default_values(wl: Workload, facts: CpuFacts, knobs: list[Any]) -> dict[str, Any]:
    """BLIS-style default. Register tile mr x nr by `register_tile`; B packed into K x nr
    micro-panels (when M has more than one micro-row to reuse them) that the inner loop
    over micro-rows reuses (from L1 while K x nr floats fit, else from L2: this space has
    no cache block of K, only the unrolled k step); a block of mc = i1*mr rows of A (mc x K)
    kept in half of L2, and nc = j1*nr columns of B in a core's half share of L3, halved until the
    outer loops give each core 4+ tasks; A packed when its micro-panel (mr x K) overflows
    L1 or the row tiles overhang M (ViT's 197 tokens in tiles of 8: 1.21-1.33x faster on a
    2-core Rocket Lake, its attention's 197 x 197 x 64 too; without a tail, packing cost
    up to 16%: 300 x 256 x 512 in rows of 12); k unrolled to about 64 FMAs per step
    (enough to hide FMA latency)."""
    M, N, K = wl.dim("M"), wl.dim("N"), wl.dim("K")
    tile_i, tile_j, tile_k = knobs[0], knobs[1], knobs[2]
    mr, nr = register_tile(facts, [((r, c), r, c, tail_use(M, r) * tail_use(N, c))
                                   for r in innermost_factors(tile_i)
                                   for c in innermost_factors(tile_j)])
    mc_rows = fit_count(facts.l2 // 2, K * 4, M)
    nc_cols = fit_count(facts.l3 // (2 * facts.cores), K * 4, N)
    i1, j1 = max(1, mc_rows // mr), max(1, nc_cols // nr)
    batches = wl.dim("B") if "B" in wl.params else 1
    while batches * -(-M // (i1 * mr)) * -(-N // (j1 * nr)) < 4 * facts.cores and j1 * i1 > 1:
        j1, i1 = (j1 // 2, i1) if j1 >= i1 else (j1, i1 // 2)
    ti = nearest_split(tile_i, (i1, mr))
    tj = nearest_split(tile_j, (j1, nr))
    fmas = mr * -(-nr // facts.lanes)  # vector FMAs per k step
    order = ("j0", "i0", "j1", "i1")  # i1 innermost: the B micro-panel stays in L1
    return {
        "tile_i": ti,
        "tile_j": tj,
        "tile_k": nearest_split(tile_k, (fit_count(64, fmas, 16),)),
        "order": order,
        "pack_b": M > mr,
        # the packed panels are padded: where the row tiles overhang M, no micro-tile then
        # reads a guarded row
        "pack_a": mr * K * 4 > facts.l1d or math.prod(ti) > M,
        "unroll_k": "unroll",
        "reduce_order": "k0 k1 i j",
        "vector_bits": facts.vector_bits,
        "parallel": parallel_levels([batches * tj[0], ti[0]], facts, 2),
    }


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
