"""Fixed-length features of a loop AST (``extract``) and of knob values (``knob_features``).

Counts, sizes and extents are log-transformed as ``log2(1 + x)`` ("lg" below); strides as
``sign(s) * lg(|s|)`` (NaN when the index is not affine: XGBoost treats NaN as missing).
Missing slots (fewer loops, buffers or stores than the layout holds) are 0.

Layout of ``extract(func)`` (``N_AST`` floats), in this order:

1. ``K_STORES`` = 3 store blocks. Stores are ranked by trip count (the product of their
   enclosing loop extents), ties in program order; block 0 is the dominant store (the
   reduction update of the main compute), 1 and 2 the next (packing, write-back, init).
   Each block has ``N_STORE`` floats:

   - ``L_LEVELS`` = 12 level slots of ``N_LEVEL`` = 32 floats. Loops of extent 1 are
     dropped; slots are aligned from the innermost loop (slot 0 = innermost) so that the
     vectorised loop and its neighbours line up across configs; loops beyond 12 from the
     inside are summarised only through slot 11's "outer product". Per slot:
     ``[0]`` lg extent, ``[1]`` depth from the outermost kept loop, ``[2]`` lg product of
     the extents above, ``[3]`` lg product of this extent and those below (iterations per
     entry), ``[4:11]`` annotation one-hot (serial, parallel, vectorized, unrolled,
     blockIdx.*, threadIdx.*, vthread), ``[11]`` guards (IfThenElse) on the path inside
     this loop, then for each of ``B_BUFFERS`` = 4 buffer slots 5 floats:
     stride of the flattened index w.r.t. this loop's var, lg footprint (distinct
     elements touched per entry of the loop, see ``footprint``), lg touch count per
     entry, lg reuse (touch / footprint), lg bytes of the footprint in 64-byte lines.
     Buffer slots: the stored buffer (output / accumulator) first, then the loaded
     buffers by number of loads (ties by name).
   - ``N_SITE`` = 16 store-wide floats: lg trip count, number of kept loops, lg of
     (float adds, muls, fmas, other float ops, loads, integer index ops) x trip count,
     is-reduction, stored scope one-hot (global, local, shared), guards on the path,
     lg guard evaluations, number of distinct buffers, lg bytes of the stored buffer.

2. ``N_GLOBAL`` = 9 function-wide floats: number of stores, lg total trip count, lg bytes
   allocated by scope (global workspaces, local, shared), number of allocations, number of
   barriers, lg total guard evaluations, lg total float ops.

3. The curve block (``N_CURVE`` floats, ``CURVE_SLICE``; ``kind="curve"``): features that
   do not depend on the number or order of loops, for transfer across workloads. For each
   buffer slot of the dominant store its reuse curve: log2 reuse against log2 footprint
   bytes over the loop levels, inner to outer, interpolated at 2^k bytes for k = 8..24
   (17 points; flat beyond the ends). Then 17 scalars: lg product of the parallel,
   vectorized, unrolled, blockIdx, threadIdx, vthread extents; innermost loop vectorized;
   lg innermost extent; stride w.r.t. the innermost loop per buffer slot (4); lg local and
   shared bytes; guard evaluations per iteration; the dominant store's share of all float
   ops; log2 of (total trip count over all stores / the dominant store's). Last the ``N_TC``
   = 32 tensor-core and element-type floats (``NestSummary.tc``): lg MMA flops (wmma and
   wgmma), their share of all flops, lg wmma operations (per warp); lg bytes loaded into
   fragments from global and from shared memory, lg bytes stored from fragments to global
   and to shared; lg cp.async bytes, bytes per cp.async; lg commits, waits and barriers (per
   block); the largest wait_group + 1 (0 without waits); lg accumulator and A/B fragment
   bytes per thread; lg argument bytes of half and of float32 elements; lg MMA flops per
   fragment byte loaded; the share of shared-memory fragment bytes whose rows all start in
   one bank (``ldm`` a multiple of 128 bytes: an unpadded layout's bank conflicts); lg bytes
   of partial tiles stored into workspaces (split-K: each is read back once by the last
   block) and lg atomics (per block: split-K's arrivals, the split times the tiles); then
   the Hopper statements: lg TMA bytes per launch, lg bytes per TMA copy, lg wgmma flops, lg
   the widest wgmma n (the block's N), lg wgmma flops per TMA byte, mbarrier words per block
   (two per pipeline stage), lg mbarrier waits and arrivals (per warpgroup), the largest
   wgmma.wait_group + 1 (groups kept in flight), the warpgroups issuing wgmma (consumers)
   and lg the largest setmaxnreg (a consumer's registers).
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
from librt.vecs import vec

from autotune.costmodel.footprint import BufStats
from autotune.costmodel.nest import Access, NestSummary, StoreSite, summarize
from autotune.ir.stmt import ForKind, PrimFunc, Scope
from autotune.ops.dtypes import ELEMENT_BYTES
from autotune.space import Config, ConfigSpace, Split

L_LEVELS = 12
B_BUFFERS = 4
K_STORES = 3
N_BUF = 5
N_LEVEL = 12 + B_BUFFERS * N_BUF
N_SITE = 16
N_STORE = L_LEVELS * N_LEVEL + N_SITE
N_GLOBAL = 9
CURVE_POINTS = tuple(range(8, 25))
N_TC = 32
N_CURVE = B_BUFFERS * len(CURVE_POINTS) + 17 + N_TC
N_AST = K_STORES * N_STORE + N_GLOBAL + N_CURVE
CURVE_SLICE = slice(N_AST - N_CURVE, N_AST)

_KIND_SLOT = {ForKind.SERIAL: 0, ForKind.PARALLEL: 1, ForKind.VECTORIZED: 2,
              ForKind.UNROLLED: 3, ForKind.BLOCK_X: 4, ForKind.BLOCK_Y: 4, ForKind.BLOCK_Z: 4,
              ForKind.THREAD_X: 5, ForKind.THREAD_Y: 5, ForKind.THREAD_Z: 5, ForKind.VTHREAD: 6}
_SCOPE_SLOT = {Scope.GLOBAL: 0, Scope.LOCAL: 1, Scope.SHARED: 2}

# Column transforms, applied to whole matrices by ``finish``: extraction itself writes raw
# values into a raw row, because per-value numpy or log calls would dominate its cost.
_ID, _LG, _SLG = 0, 1, 2
# A vec of doubles rather than a list or an array: compiled code stores into it without
# boxing each float, and numpy reads its buffer without converting each one.
Raw = vec[float]
_ZERO_ROW = vec[float]([0.0] * N_AST)  # each row starts as a (slice) copy of this


@lru_cache(maxsize=1)
def _plan() -> tuple[np.ndarray, np.ndarray]:
    """Indices of the lg and signed-lg columns of the raw vector."""
    t = [_ID] * N_AST
    for k in range(K_STORES):
        for lv in range(L_LEVELS):
            o = k * N_STORE + lv * N_LEVEL
            t[o] = t[o + 2] = t[o + 3] = _LG
            for b in range(B_BUFFERS):
                p = o + 12 + b * N_BUF
                t[p] = _SLG
                t[p + 1] = t[p + 2] = t[p + 3] = t[p + 4] = _LG
        o = k * N_STORE + L_LEVELS * N_LEVEL
        for j in (0, 2, 3, 4, 5, 6, 7, 13, 15):
            t[o + j] = _LG
    o = K_STORES * N_STORE
    for j in (1, 2, 3, 4, 7, 8):
        t[o + j] = _LG
    o = CURVE_SLICE.start + B_BUFFERS * len(CURVE_POINTS)
    for j in (0, 1, 2, 3, 4, 5, 7, 12, 13):
        t[o + j] = _LG
    for j in range(8, 12):
        t[o + j] = _SLG
    o += 17
    for j in (0, 2, 3, 4, 5, 6, 7, 9, 10, 11, 13, 14, 15, 16, 17, 19, 20, 21, 22, 23, 24, 25,
              27, 28, 31):
        t[o + j] = _LG
    arr = np.asarray(t)
    return np.flatnonzero(arr == _LG), np.flatnonzero(arr == _SLG)


def finish(raw: np.ndarray) -> np.ndarray:
    """Apply the log transforms to raw feature rows (shape (n, N_AST)); float32 result."""
    x = np.array(raw, dtype=np.float64, ndmin=2)  # a copy: ``raw`` may be a cached buffer
    lg_cols, slg_cols = _plan()
    x[:, lg_cols] = np.log2(1.0 + x[:, lg_cols])
    s = x[:, slg_cols]
    x[:, slg_cols] = np.sign(s) * np.log2(1.0 + np.abs(s))
    return x.astype(np.float32)


# ---------------------------------------------------------------------------- raw blocks

def _buffer_groups(site: StoreSite) -> list[list[Access]]:
    """Accesses grouped by buffer: the stored buffer first, then loads by count, then name."""
    groups: dict[int, list[Access]] = {}
    for a in site.accesses:
        groups.setdefault(id(a.buffer), []).append(a)
    first = groups.pop(id(site.buffer))
    rest = sorted(groups.values(), key=lambda g: (-len(g), g[0].buffer.name))
    return [first, *rest]


def _store_block(site: StoreSite, out: Raw, base: int) -> list[BufStats]:
    ext = site.extents
    n = len(ext)
    inner = [1] * n
    acc = 1
    for lv in range(n - 1, -1, -1):
        acc *= ext[lv]
        inner[lv] = acc
    trip = float(acc)
    stats = [BufStats(g, ext, inner) for g in _buffer_groups(site)[:B_BUFFERS]]
    kinds = site.kinds
    guards = site.guard_depths
    outer = math.prod(ext[:max(0, n - L_LEVELS)])
    for lv in range(max(0, n - L_LEVELS), n):
        o = base + (n - 1 - lv) * N_LEVEL
        out[o] = ext[lv]
        out[o + 1] = lv
        out[o + 2] = outer
        outer *= ext[lv]
        out[o + 3] = inner[lv]
        out[o + 4 + _KIND_SLOT[kinds[lv]]] = 1.0
        if guards:
            out[o + 11] = sum(1 for g in guards if g > lv)
        p = o + 12
        for st in stats:
            f = st.foot[lv]
            t = st.touch[lv]
            out[p] = st.stride[lv]
            out[p + 1] = f
            out[p + 2] = t
            out[p + 3] = t / f
            out[p + 4] = st.lines[lv]
            p += 5
    o = base + L_LEVELS * N_LEVEL
    ops = site.ops
    out[o] = trip
    out[o + 1] = n
    out[o + 2] = ops["add"] * trip
    out[o + 3] = ops["mul"] * trip
    out[o + 4] = ops["fma"] * trip
    out[o + 5] = ops["other"] * trip
    out[o + 6] = site.n_loads * trip
    out[o + 7] = ops["int"] * trip
    out[o + 8] = float(site.is_reduction)
    out[o + 9 + _SCOPE_SLOT[site.buffer.scope]] = 1.0
    out[o + 12] = len(guards)
    out[o + 13] = _guard_evals(site)
    out[o + 14] = len({id(a.buffer) for a in site.accesses})
    out[o + 15] = site.buffer.size * ELEMENT_BYTES.get(site.buffer.dtype, 4)
    return stats


def _guard_evals(site: StoreSite) -> float:
    return float(sum(math.prod(site.extents[:g]) for g in site.guard_depths))


def _flops(site: StoreSite) -> float:
    ops = site.ops
    return (ops["add"] + ops["mul"] + 2 * ops["fma"] + ops["other"]) * math.prod(site.extents)


def _interp(px: list[float], py: list[float], out: Raw, o: int) -> None:
    """Piecewise-linear ``py(px)`` at ``CURVE_POINTS`` into ``out[o:]``, flat beyond the ends."""
    j = 0
    n = len(px)
    for x in CURVE_POINTS:
        while j < n and px[j] < x:
            j += 1
        if j == 0:
            out[o] = py[0]
        elif j == n:
            out[o] = py[-1]
        else:
            x0, x1 = px[j - 1], px[j]
            out[o] = py[j - 1] + (py[j] - py[j - 1]) * (x - x0) / (x1 - x0)
        o += 1


def _curve(site: StoreSite, stats: list[BufStats], summary: NestSummary, trips: list[float],
           out: Raw, base: int) -> None:
    n = len(site.extents)
    npts = len(CURVE_POINTS)
    log2 = math.log2
    for b, st in enumerate(stats):
        if not n:
            break
        # inner to outer: footprint bytes never shrink going out, so x is non-decreasing;
        # on equal footprints keep the outer reuse (the same data used more often)
        px: list[float] = []
        py: list[float] = []
        for lv in range(n - 1, -1, -1):
            x = log2(st.lines[lv])
            y = log2(st.touch[lv] / st.foot[lv])
            if px and x <= px[-1]:
                py[-1] = max(py[-1], y)
            else:
                px.append(x)
                py.append(y)
        _interp(px, py, out, base + b * npts)
    o = base + B_BUFFERS * npts
    prods = [1.0] * 6
    for e, k in zip(site.extents, site.kinds):
        slot = _KIND_SLOT[k]
        if slot:
            prods[slot - 1] *= e
    for i, p in enumerate(prods):
        out[o + i] = p if p > 1 else 0.0
    if n:
        out[o + 6] = float(site.kinds[-1] is ForKind.VECTORIZED)
        out[o + 7] = site.extents[-1]
        for b, st in enumerate(stats):
            out[o + 8 + b] = st.stride[-1]
    out[o + 12] = summary.alloc_bytes[Scope.LOCAL]
    out[o + 13] = summary.alloc_bytes[Scope.SHARED]
    trip = max(trips[0], 1.0)
    out[o + 14] = _guard_evals(site) / trip
    total = sum(_flops(s) for s in summary.sites)
    out[o + 15] = _flops(site) / total if total else 0.0
    out[o + 16] = math.log2(max(sum(trips), 1.0) / trip)


def extract_raw(summary: NestSummary) -> Raw:
    """Untransformed features of a ``NestSummary`` (``finish`` applies the logs)."""
    out = _ZERO_ROW[:]
    sites = summary.sites
    trips = [float(math.prod(s.extents)) for s in sites]
    order = sorted(range(len(sites)), key=lambda i: -trips[i])  # stable: ties in program order
    main_stats: list[BufStats] = []
    for k, i in enumerate(order[:K_STORES]):
        stats = _store_block(sites[i], out, k * N_STORE)
        if k == 0:
            main_stats = stats
    o = K_STORES * N_STORE
    out[o] = len(sites)
    out[o + 1] = sum(trips)
    out[o + 2] = summary.alloc_bytes[Scope.GLOBAL]
    out[o + 3] = summary.alloc_bytes[Scope.LOCAL]
    out[o + 4] = summary.alloc_bytes[Scope.SHARED]
    out[o + 5] = summary.n_allocs
    out[o + 6] = summary.n_syncs
    out[o + 7] = sum(_guard_evals(s) for s in sites)
    out[o + 8] = sum(_flops(s) for s in sites)
    if order:
        _curve(sites[order[0]], main_stats, summary, [trips[i] for i in order], out,
               CURVE_SLICE.start)
    _tensor_core(summary, out[o + 8], out, N_AST - N_TC)
    return out


def _tensor_core(summary: NestSummary, flops: float, out: Raw, o: int) -> None:
    """The ``N_TC`` block: what the tensor-core, cp.async and Hopper statements do
    (``flops``: the float ops of the stores)."""
    tc = summary.tc
    mma = tc["mma_flops"]
    out[o] = mma
    out[o + 1] = mma / (mma + flops) if mma > 0 else 0.0
    out[o + 2] = tc["mma"]
    out[o + 3] = tc["frag_load_global"]
    out[o + 4] = tc["frag_load_shared"]
    out[o + 5] = tc["frag_store_global"]
    out[o + 6] = tc["frag_store_shared"]
    out[o + 7] = tc["async_bytes"]
    copies = tc["async_copies"]
    out[o + 8] = tc["async_bytes"] / copies if copies > 0 else 0.0
    out[o + 9] = tc["commits"]
    out[o + 10] = tc["waits"]
    out[o + 11] = tc["syncs"]
    out[o + 12] = tc["in_flight"]
    out[o + 13] = tc["acc_frag_bytes"]
    out[o + 14] = tc["ab_frag_bytes"]
    out[o + 15] = tc["half_arg_bytes"]
    out[o + 16] = tc["float_arg_bytes"]
    loaded = tc["frag_load_global"] + tc["frag_load_shared"]
    out[o + 17] = mma / loaded if loaded > 0 else 0.0
    shared = tc["frag_load_shared"] + tc["frag_store_shared"]
    out[o + 18] = tc["bank_aligned"] / shared if shared > 0 else 0.0
    out[o + 19] = tc["workspace_bytes"]
    out[o + 20] = tc["atomics"]
    tma, wgmma = tc["tma_bytes"], tc["wgmma_flops"]
    out[o + 21] = tma
    copies = tc["tma_copies"]
    out[o + 22] = tma / copies if copies > 0 else 0.0
    out[o + 23] = wgmma
    out[o + 24] = tc["wgmma_n"]
    out[o + 25] = wgmma / tma if tma > 0 else 0.0
    out[o + 26] = tc["barrier_slots"]
    out[o + 27] = tc["mbar_waits"]
    out[o + 28] = tc["mbar_arrives"]
    out[o + 29] = tc["wgmma_in_flight"]
    out[o + 30] = tc["consumers"]
    out[o + 31] = tc["max_nreg"]


def finish_rows(raws: Sequence[Raw | None]) -> np.ndarray:
    """``finish`` of raw rows as one float32 block, with an all-NaN row for each None (a
    config that failed to lower)."""
    out: np.ndarray = np.full((len(raws), N_AST), np.nan, dtype=np.float32)
    ok = [i for i, r in enumerate(raws) if r is not None]
    if ok:
        out[ok] = finish(np.stack([np.frombuffer(r) for r in raws if r is not None]))
    return out


def extract(func: PrimFunc) -> np.ndarray:
    """The ``N_AST`` float32 features of a loop AST (layout in the module docstring)."""
    return finish(np.frombuffer(extract_raw(summarize(func))))[0]


def extract_many(funcs: Iterable[PrimFunc]) -> np.ndarray:
    """``extract`` of several functions as one (n, N_AST) matrix (one vectorised transform)."""
    return finish_rows([extract_raw(summarize(f)) for f in funcs])


def extract_curve(func: PrimFunc) -> np.ndarray:
    """Only the structure-independent curve block of ``extract(func)``."""
    return extract(func)[CURVE_SLICE]


# ---------------------------------------------------------------------------- names

def feature_names(kind: str = "ast") -> list[str]:
    """Names of the features of ``extract`` (kind "ast") or of its curve block ("curve")."""
    kinds = ["serial", "parallel", "vectorized", "unrolled", "blockIdx", "threadIdx", "vthread"]
    buf = ["stride", "foot", "touch", "reuse", "bytes"]
    site = ["trip", "n_loops", "adds", "muls", "fmas", "other_ops", "loads", "int_ops",
            "is_reduction", "scope_global", "scope_local", "scope_shared", "n_guards",
            "guard_evals", "n_buffers", "stored_bytes"]
    names: list[str] = []
    for k in range(K_STORES):
        for lv in range(L_LEVELS):
            p = f"s{k}.l{lv}."
            names += [p + "extent", p + "depth", p + "outer", p + "inner"]
            names += [p + "kind_" + x for x in kinds] + [p + "guards"]
            names += [f"{p}b{b}.{x}" for b in range(B_BUFFERS) for x in buf]
        names += [f"s{k}.{x}" for x in site]
    names += ["g.n_stores", "g.trip", "g.global_bytes", "g.local_bytes", "g.shared_bytes",
              "g.n_allocs", "g.n_syncs", "g.guard_evals", "g.flops"]
    curve = [f"c.b{b}.reuse@2^{k}" for b in range(B_BUFFERS) for k in CURVE_POINTS]
    curve += [f"c.{x}" for x in ("parallel", "vectorized", "unrolled", "blockIdx", "threadIdx",
                                 "vthread", "inner_vectorized", "inner_extent")]
    curve += [f"c.b{b}.inner_stride" for b in range(B_BUFFERS)]
    curve += ["c.local_bytes", "c.shared_bytes", "c.guard_rate", "c.flop_share", "c.aux_trip"]
    curve += [f"tc.{x}" for x in ("mma_flops", "mma_share", "mma", "frag_load_global",
                                  "frag_load_shared", "frag_store_global", "frag_store_shared",
                                  "async_bytes", "async_width", "commits", "waits", "syncs",
                                  "in_flight", "acc_frag_bytes", "ab_frag_bytes", "half_arg_bytes",
                                  "float_arg_bytes", "mma_intensity", "bank_aligned",
                                  "workspace_bytes", "atomics", "tma_bytes", "tma_box_bytes",
                                  "wgmma_flops", "wgmma_n", "tma_intensity", "barrier_slots",
                                  "mbar_waits", "mbar_arrives", "wgmma_in_flight", "consumers",
                                  "max_nreg")]
    names += curve
    assert len(names) == N_AST and len(curve) == N_CURVE
    return curve if kind == "curve" else names


# ---------------------------------------------------------------------------- knobs

def knob_features(space: ConfigSpace, configs: Sequence[Config] | Iterable[Config]) -> np.ndarray:
    """Knob positions scaled to [0, 1] (``space.encode``), then lg of every Split factor."""
    configs = list(configs)
    enc: np.ndarray = space.encode(configs).astype(np.float64)
    dims = np.maximum(np.asarray(space.dims, dtype=np.float64) - 1.0, 1.0)
    cols = [enc / dims]
    splits = [k.name for k in space.knobs if isinstance(k, Split)]
    if splits:
        vals = np.array([[f for name in splits for f in c[name]] for c in configs],
                        dtype=np.float64).reshape(len(configs), -1)
        cols.append(np.log2(1.0 + vals))
    return np.concatenate(cols, axis=1).astype(np.float32)
