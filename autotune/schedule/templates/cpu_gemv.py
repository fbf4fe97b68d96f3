"""CPU template for matmul with one row (M = 1: a classifier layer at batch 1).

A GEMV reads each element of B once and does one FMA with it: it is bound by the speed B
streams in, not by arithmetic, and a register tile has nothing to reuse. B is read
unpacked (its rows are contiguous along N; a packing pass would read B once more), but a
prepacked workload's B (a model's weight, packed once) comes in panels as wide as a
task's columns (``pack_b``): each task then streams one contiguous block. The
parallel tasks split the columns (``tile_j``'s outer factor) and, with ``split_k``, the
rows too: each task then sums a contiguous block of B's rows into a partial row, and a
last pass adds the partial rows and applies the epilogue. Two ways to walk a task's block:
``rows`` keeps its accumulator in L1 and sweeps it once per ``tile_k`` rows (contiguous
row segments, what prefetchers stream best); ``panel`` keeps a register tile and walks a
column panel down the rows (the general matmul template's order).
"""
from __future__ import annotations

from math import ceil
from typing import Any

from autotune.ops import Workload
from autotune.schedule.definitions import gemv_graph, matmul_graph
from autotune.schedule.schedule import Schedule
from autotune.schedule.templates.common import nearest_split, parallel_outer, vector_width
from autotune.space import Choice, Config, ConfigSpace, Knob, Split
from autotune.target import Target
from autotune.target.cpu_facts import CpuFacts, facts_of

MAX_PARTS = 16
MIN_SEGMENT = 256  # floats of a row a task reads in one go (1 KiB: 16 cache lines)
# A smaller B streams through one core in about the time a thread team takes to wake.
MIN_PARALLEL_BYTES = 128 * 1024
# Tasks per core where B comes in panels (see default_values)
PACKED_TASKS_PER_CORE = 2


def is_gemv(wl: Workload) -> bool:
    """Whether this template schedules ``wl``: a matmul of one row."""
    return wl.op == "matmul" and wl.dim("M") == 1


def split_k_choices(K: int) -> list[int]:
    """Row ranges to split K into: 1 and powers of two up to MAX_PARTS whose ranges are all
    non-empty."""
    return [p for p in (1, 2, 4, 8, MAX_PARTS) if p == 1 or ceil(K / ceil(K / p)) == p]


def space(wl: Workload, target: Target) -> ConfigSpace:
    N, K = wl.dim("N"), wl.dim("K")
    lanes = target.vector_lanes
    knobs: list[Knob] = [
        Split("tile_j", N, 3, max_inner=8 * lanes, inner_multiple_of=lanes),
        Split("tile_k", K, 2, max_inner=16),
        Choice("split_k", split_k_choices(K)),
        Choice("walk", ["rows", "panel"]),
        Choice("vector_bits", sorted({target.vector_bits, min(256, target.vector_bits)},
                                     reverse=True)),
    ]
    if wl.prepacked:
        knobs.append(Choice("pack_b", [True, False]))
    default = default_values(wl, facts_of(target), knobs)
    return ConfigSpace(knobs, default=default, name="cpu_gemv")


def default_values(wl: Workload, facts: CpuFacts, knobs: list[Any]) -> dict[str, Any]:
    """One task per core, each over a contiguous range of columns, walked row by row in
    steps of 8 vectors (on a 2-core Zen 5, 1x512 @ 512x1000: 10 us, where 4 tasks per core
    took 11-14 us, 8 rows per sweep 15 us and the register-tile panel walk 22 us). A task's
    row segments stay at least MIN_SEGMENT floats long: with more cores than N allows at that
    length, the rows are split among the tasks too (split K: a contiguous block of B each).
    A B under MIN_PARALLEL_BYTES is one task. A prepacked B is read in panels; one larger
    than a core's L2 (cold as a model's run leaves it) has each core's columns split into
    PACKED_TASKS_PER_CORE row blocks: on a 2-core Zen 4, timed in the model, MobileNet-V2's
    1280 x 1000 classifier took 0.49 ms unpacked, 0.28 packed in one task per core and
    0.17-0.19 in two or four; ResNet-50's 2048 x 1000 0.74, 0.42 and 0.27-0.31; ResNet-18's
    512 x 1000 0.12, 0.12 and 0.08. (Hot, a B of 512 KB took 4.6 us so against 3.6.)"""
    N, K = wl.dim("N"), wl.dim("K")
    tile_j, tile_k, split_k = knobs[0], knobs[1], knobs[2]
    lanes = facts.lanes
    b_bytes = K * N * 4
    cores = facts.cores if b_bytes >= MIN_PARALLEL_BYTES else 1
    ranges = max(1, min(cores, N // MIN_SEGMENT))  # column ranges that keep segments long
    # B in panels (prepacked) and over a core's L2: two tasks per core, the rows split too
    cold = wl.prepacked and cores > 1 and b_bytes > facts.l2
    tasks = cores * PACKED_TASKS_PER_CORE if cold else cores
    parts = next((p for p in split_k.candidates if p * ranges >= tasks), split_k.candidates[-1])
    if not cold:
        ranges = -(-cores // parts)
    nr = min(8 * lanes, -(-N // lanes) * lanes)
    per_task = max(1, -(-N // (ranges * nr)))
    values = {
        "tile_j": nearest_split(tile_j, (per_task, nr)),
        "tile_k": nearest_split(tile_k, (1,)),
        "split_k": parts,
        "walk": "rows",
        "vector_bits": facts.vector_bits,
    }
    if wl.prepacked:
        values["pack_b"] = True
    return values


def schedule(wl: Workload, target: Target, cfg: Config) -> Schedule:
    tj, tk, parts = cfg["tile_j"], cfg["tile_k"], cfg["split_k"]
    lanes = cfg["vector_bits"] // 32
    pack = tj[1] * tj[2] if cfg.get("pack_b") else None  # a task's columns
    g = gemv_graph(wl, parts, pack) if parts > 1 else matmul_graph(wl, pack=pack)
    s = g.schedule()
    main = g.temps[-1] if parts > 1 else g.output  # the stage that streams B
    acc = s.cache_write(main, "local")
    st = s[main]
    lead, j = st.axis  # lead: the output's one row, or the row range of a partial sum
    j0, j1, j2 = st.tile(j, tj)
    v = vector_width(tj[2], lanes)
    j2o, j2v = st.split(j2, factor=v)
    st.reorder(lead, j0, j1, j2o, j2v)
    st.vectorize(j2v)
    task = parallel_outer(st, [lead, j0], 2)

    rows = cfg["walk"] == "rows"
    acc.compute_at(st, task if rows else j1)
    k0, k1 = acc.tile(acc.reduce_axis[0], tk)
    if rows:
        a1, a2o, a2v = acc.axis
        acc.reorder(k0, a1, k1, a2o, a2v)
    else:
        a2o, a2v = acc.axis
        acc.reorder(k0, k1, a2o, a2v)
    acc.unroll(k1)
    acc.unroll(a2o)
    acc.vectorize(a2v)
    if parts > 1:  # add the partial rows, a vector of columns at a time
        total = s.cache_write(g.output, "local")
        out = s[g.output]
        i, j = out.axis
        jo, jv = out.split(j, factor=min(lanes, wl.dim("N")))
        out.vectorize(jv)
        total.compute_at(out, jo)
        (tv,) = total.axis
        total.reorder(total.reduce_axis[0], tv)
        total.vectorize(tv)
    return s
