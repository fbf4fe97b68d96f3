"""Loop-nest summary of a PrimFunc: one ``StoreSite`` per Store, with its enclosing loops.

Feature extraction reads only this summary, so the AST is walked once per function. Loops
of extent 1 are dropped (they run once and would only shift the level alignment). The
tensor-core, cp.async and Hopper statements, which are not Stores, are summed into ``tc``
(counts over the whole launch; a warp-collective statement counts once per warp, a
warpgroup-collective one once per warpgroup). A warp-specialized kernel gives its roles by
guards on the thread index (``tx < 128``, its else, ``tx == 0``): the Hopper statements
count the threads those guards leave.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from autotune.ir.analysis import affine
from autotune.ir.expr import FLOAT, BinOp, Cmp, Const, Expr, Load, Select, Var
from autotune.ir.stmt import (
    WARP,
    WARPGROUP,
    Allocate,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    AtomicAdd,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    MmaFill,
    MmaLoad,
    MmaStore,
    MmaSync,
    PrimFunc,
    Scope,
    SetMaxNReg,
    Stmt,
    Store,
    Sync,
    TmaLoad,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
    fragment_dims,
    walk_stmts,
)
from autotune.ir.visitor import StmtVisitor
from autotune.ops.dtypes import ELEMENT_BYTES, MBARRIER

WGMMA_MK = 64 * 16  # the m and k of every wgmma
# the counters of ``NestSummary.tc``
TC_KEYS = ("mma_flops", "mma", "frag_load_global", "frag_load_shared", "frag_store_global",
           "frag_store_shared", "async_bytes", "async_copies", "commits", "waits", "syncs",
           "in_flight", "acc_frag_bytes", "ab_frag_bytes", "half_arg_bytes", "float_arg_bytes",
           "bank_aligned", "workspace_bytes", "atomics", "tma_bytes", "tma_copies",
           "wgmma_flops", "wgmma_n", "barrier_slots", "mbar_waits", "mbar_arrives",
           "wgmma_in_flight", "consumers", "max_nreg")
_HOPPER = (TmaLoad, MbarrierInit, MbarrierArrive, MbarrierWait, Wgmma, WgmmaFence, WgmmaCommit,
           WgmmaWait, SetMaxNReg)
_ALL_THREADS = (0, 1 << 30)  # a thread span no role guard narrowed
BANKS_BYTES = 128  # 32 banks of 4 bytes: rows this far apart start in the same bank
# (a set, not ``ForKind.is_thread_binding``: an Enum's ``.value`` is a Python-level property)
_BINDINGS = frozenset(k for k in ForKind if k.is_thread_binding)
_SCOPES = tuple(Scope)  # (iterating the Enum class itself runs Python-level code each time)
_THREADS = frozenset((ForKind.THREAD_X, ForKind.THREAD_Y, ForKind.THREAD_Z))


@dataclass
class Access:
    """One read or write of a buffer. Per dimension: the affine part of the index as
    ``(coefs by level, const)`` and the levels whose vars occur in non-affine terms (say
    ``f // 4`` of a fused loop ``f``), which are constant below those levels."""

    buffer: Buffer
    dims: list[tuple[dict[int, int], int]]
    opaque: list[frozenset[int]]


@dataclass
class StoreSite:
    """A Store with the loops (outer to inner, extent > 1) and guards on its path."""

    buffer: Buffer
    extents: list[int]
    kinds: list[ForKind]
    guard_depths: list[int]   # per guard on the path: how many kept loops enclose it
    accesses: list[Access]     # the write first, then loads in expression order
    is_reduction: bool         # the value reads the stored element (acc = acc + ...)
    ops: dict[str, int]        # float add/mul/fma/other and int index ops per execution
    n_loads: int


@dataclass
class NestSummary:
    """Every store site plus function-wide allocation and barrier counts."""

    sites: list[StoreSite] = field(default_factory=list)
    alloc_bytes: dict[Scope, int] = field(default_factory=lambda: dict.fromkeys(_SCOPES, 0))
    n_allocs: int = 0
    n_syncs: int = 0
    # launch-wide counts: MMA flops and operations (per warp), bytes through fragments by
    # memory scope, cp.async bytes and copies, commits, waits and barriers (per block),
    # groups a wait leaves in flight (the largest wait_group, plus 1 when there is a wait),
    # fragment bytes per thread (registers), argument bytes by element type, shared
    # bytes through fragments whose rows all start in one bank (ldm a multiple of 128
    # bytes), fragment bytes stored into workspaces (split-K's partial tiles) and atomics
    # (per block); TMA bytes and copies, wgmma flops (also in the MMA flops) and the widest
    # n, mbarrier words per block, mbarrier waits and arrivals (per warpgroup), the largest
    # wgmma.wait_group + 1, warpgroups issuing wgmma (per block) and the largest setmaxnreg
    tc: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TC_KEYS, 0.0))
    workspaces: frozenset[Buffer] = frozenset()


def summarize(func: PrimFunc) -> NestSummary:
    """Walk ``func`` once and summarise each store's loop nest and accesses."""
    out = NestSummary(workspaces=frozenset(func.workspaces))
    for w in func.workspaces:
        out.alloc_bytes[Scope.GLOBAL] += w.size * ELEMENT_BYTES.get(w.dtype, 4)
    for b in func.args:
        key = "half_arg_bytes" if ELEMENT_BYTES.get(b.dtype, 4) == 2 else "float_arg_bytes"
        out.tc[key] += b.size * ELEMENT_BYTES.get(b.dtype, 4)
    _Walker(out).visit(func.body)
    return out


class _Walker(StmtVisitor):
    """The loop path down to each statement, as shared lists pushed and popped (the AST is
    shallow, and copying the path per node would dominate the cost); ``span``: the
    threadIdx.x range that role guards leave (read by the Hopper statements only)."""

    def __init__(self, out: NestSummary) -> None:
        self.out = out
        self.vars_: list[Var] = []
        self.extents: list[int] = []
        self.kinds: list[ForKind] = []
        self.guards: list[int] = []
        self.span = _ALL_THREADS

    def visit_for(self, s: For) -> None:
        if s.extent <= 1:
            self.visit(s.body)
            return
        self.vars_.append(s.var)
        self.extents.append(s.extent)
        self.kinds.append(s.kind)
        self.visit(s.body)
        self.vars_.pop()
        self.extents.pop()
        self.kinds.pop()

    def visit_if(self, s: IfThenElse) -> None:
        self.guards.append(len(self.vars_))
        span = self.span
        then, other = _role_spans(s.cond, self.vars_, self.kinds, span)
        self.span = then
        self.visit(s.then)
        if s.else_ is not None:
            self.span = other
            self.visit(s.else_)
        self.span = span
        self.guards.pop()

    def visit_allocate(self, s: Allocate) -> None:
        b, out = s.buffer, self.out
        out.alloc_bytes[b.scope] += b.size * ELEMENT_BYTES.get(b.dtype, 4)
        out.n_allocs += 1
        if b.scope is Scope.WMMA_ACC or b.scope is Scope.WMMA_A or b.scope is Scope.WMMA_B:
            _fragment_alloc(b, s.body, out)
        elif b.dtype == MBARRIER:
            out.tc["barrier_slots"] += b.size
        self.visit(s.body)

    def visit_leaf(self, s: Stmt) -> None:
        out, extents, kinds, guards = self.out, self.extents, self.kinds, self.guards
        if isinstance(s, Store):
            out.sites.append(_site(s, self.vars_, extents, kinds, guards))
        elif isinstance(s, Sync):
            out.n_syncs += 1
            out.tc["syncs"] += _executions(extents, kinds, guards, "block")
        elif isinstance(s, (MmaSync, MmaLoad, MmaStore, AsyncCopy, AsyncCommit, AsyncWait)):
            _tensor_core(s, extents, kinds, guards, out)
        elif isinstance(s, AtomicAdd):
            out.tc["atomics"] += _executions(extents, kinds, guards, "block")
        elif isinstance(s, _HOPPER):
            _hopper(s, extents, kinds, guards, out, self.span)


def _role_spans(cond: Expr, vars_: list[Var], kinds: list[ForKind], span: tuple[int, int]
                ) -> tuple[tuple[int, int], tuple[int, int]]:
    """The threadIdx.x spans of the then and else branches of a guard ``tx < c``,
    ``tx >= c`` or ``tx == c``; other guards leave ``span`` as it is."""
    if not isinstance(cond, Cmp) or not isinstance(cond.b, Const):
        return span, span
    a = cond.a
    if not isinstance(a, Var) or a not in vars_:
        return span, span
    if kinds[vars_.index(a)] is not ForKind.THREAD_X:
        return span, span
    c = int(cond.b.value)
    lo, hi = span
    if cond.op == "<":
        return (lo, min(hi, c)), (max(lo, c), hi)
    if cond.op == ">=":
        return (max(lo, c), hi), (lo, min(hi, c))
    if cond.op == "==":
        return (max(lo, c), min(hi, c + 1)), span
    return span, span


def _executions(extents: list[int], kinds: list[ForKind], guards: list[int], unit: str,
                span: tuple[int, int] = _ALL_THREADS) -> float:
    """How often a statement under these loops runs in the launch, counted once per
    ``unit``: "block" (a barrier, which a block's threads pass together), "warpgroup",
    "warp" (a warp-collective statement) or "thread"; ``span`` narrows threadIdx.x."""
    if any(k in _BINDINGS for k in kinds):
        _, extents, kinds, _ = _rebind([], extents, kinds, guards)
    n = 1.0
    threads = 1
    for e, k in zip(extents, kinds):
        if k in _THREADS:
            if k is ForKind.THREAD_X:
                e = max(0, min(e, span[1]) - max(0, span[0]))
            threads *= e
        else:
            n *= e
    if unit == "warp":
        n *= max(1, threads // WARP)
    elif unit == "warpgroup":
        n *= -(-threads // WARPGROUP)
    elif unit == "thread":
        n *= threads
    return n


def _hopper(s: Stmt, extents: list[int], kinds: list[ForKind], guards: list[int],
            out: NestSummary, span: tuple[int, int]) -> None:
    """Count a TMA, mbarrier, wgmma or setmaxnreg statement into ``out.tc``."""
    tc = out.tc
    if isinstance(s, TmaLoad):
        n = _executions(extents, kinds, guards, "thread", span)
        tc["tma_copies"] += n
        tc["tma_bytes"] += n * s.tmap.box_elems * ELEMENT_BYTES.get(s.dst.dtype, 4)
    elif isinstance(s, Wgmma):
        n = _executions(extents, kinds, guards, "warpgroup", span)
        flops = 2.0 * WGMMA_MK * s.n * n
        tc["wgmma_flops"] += flops
        tc["mma_flops"] += flops
        tc["wgmma_n"] = max(tc["wgmma_n"], float(s.n))
        threads = [k for k in kinds if k in _THREADS]
        groups = _executions([e for e, k in zip(extents, kinds) if k in _THREADS], threads,
                             [], "warpgroup", span)
        tc["consumers"] = max(tc["consumers"], groups)
    elif isinstance(s, MbarrierWait):
        tc["mbar_waits"] += _executions(extents, kinds, guards, "warpgroup", span)
    elif isinstance(s, MbarrierArrive):
        tc["mbar_arrives"] += _executions(extents, kinds, guards, "warpgroup", span)
    elif isinstance(s, WgmmaWait):
        tc["wgmma_in_flight"] = max(tc["wgmma_in_flight"], float(s.pending + 1))
    elif isinstance(s, SetMaxNReg):
        tc["max_nreg"] = max(tc["max_nreg"], float(s.count))


def _tensor_core(s: Stmt, extents: list[int], kinds: list[ForKind], guards: list[int],
                 out: NestSummary) -> None:
    tc = out.tc
    if isinstance(s, MmaSync):
        n = _executions(extents, kinds, guards, "warp")
        tc["mma"] += n
        tc["mma_flops"] += 2.0 * s.shape[0] * s.shape[1] * s.shape[2] * n
    elif isinstance(s, MmaLoad):
        rows, cols = fragment_dims(s.frag.scope, s.shape)
        item = ELEMENT_BYTES.get(s.src.dtype, 4)
        moved = rows * cols * item * _executions(extents, kinds, guards, "warp")
        shared = s.src.scope is Scope.SHARED
        tc["frag_load_shared" if shared else "frag_load_global"] += moved
        if shared and s.ldm * item % BANKS_BYTES == 0:
            tc["bank_aligned"] += moved
    elif isinstance(s, MmaStore):
        item = ELEMENT_BYTES.get(s.dst.dtype, 4)
        moved = s.shape[0] * s.shape[1] * item * _executions(extents, kinds, guards, "warp")
        shared = s.dst.scope is Scope.SHARED
        tc["frag_store_shared" if shared else "frag_store_global"] += moved
        if s.dst in out.workspaces:
            tc["workspace_bytes"] += moved
        if shared and s.ldm * item % BANKS_BYTES == 0:
            tc["bank_aligned"] += moved
    elif isinstance(s, AsyncCopy):
        n = _executions(extents, kinds, guards, "thread")
        tc["async_copies"] += n
        tc["async_bytes"] += n * s.elems * ELEMENT_BYTES.get(s.dst.dtype, 4)
    elif isinstance(s, AsyncCommit):
        tc["commits"] += _executions(extents, kinds, guards, "block")
    elif isinstance(s, AsyncWait):
        tc["waits"] += _executions(extents, kinds, guards, "block")
        if s.pending + 1 > tc["in_flight"]:
            tc["in_flight"] = float(s.pending + 1)


def _fragment_alloc(b: Buffer, body: Stmt, out: NestSummary) -> None:
    """Register bytes per thread of fragment buffer ``b`` (its shape from its first use)."""
    for x in walk_stmts(body):
        shape: tuple[int, int, int] | None = None
        if isinstance(x, (MmaFill, MmaLoad, MmaStore)):
            if x.frag is b:
                shape = x.shape
        elif isinstance(x, MmaSync):
            if x.acc is b or x.a is b or x.b is b:
                shape = x.shape
        if shape is not None:
            rows, cols = fragment_dims(b.scope, shape)
            key = "acc_frag_bytes" if b.scope is Scope.WMMA_ACC else "ab_frag_bytes"
            out.tc[key] += b.size * rows * cols * ELEMENT_BYTES.get(b.dtype, 4) / WARP
            return


def _site(st: Store, vars_: list[Var], extents: list[int], kinds: list[ForKind],
          guards: list[int]) -> StoreSite:
    if any(k in _BINDINGS for k in kinds):
        vars_, extents, kinds, guards = _rebind(vars_, extents, kinds, guards)
    level = {v: i for i, v in enumerate(vars_)}
    ops = {"add": 0, "mul": 0, "fma": 0, "other": 0, "int": 0}
    loads: list[Load] = []
    _count(st.value, ops, loads)
    for ix in st.indices:
        _count(ix, ops, loads)
    accesses = [_access(st.buffer, st.indices, level, ops)]
    for ld in loads:
        accesses.append(_access(ld.buffer, ld.indices, level, ops))
    is_red = any(ld.buffer is st.buffer and ld.indices == st.indices for ld in loads)
    return StoreSite(st.buffer, list(extents), list(kinds), list(guards), accesses, is_red, ops,
                     len(loads))


def _rebind(vars_: list[Var], extents: list[int], kinds: list[ForKind], guards: list[int]
            ) -> tuple[list[Var], list[int], list[ForKind], list[int]]:
    """Drop loops re-bound by an inner loop of the same thread tag (a block's threads
    share a copy into shared memory): the same threads, not a further trip."""
    keep = [True] * len(kinds)
    seen: set[ForKind] = set()
    for i in range(len(kinds) - 1, -1, -1):
        if kinds[i] in _BINDINGS:
            keep[i] = kinds[i] not in seen
            seen.add(kinds[i])
    if all(keep):
        return vars_, extents, kinds, guards
    depth = [0] * (len(kinds) + 1)  # kept loops among the first d
    for i, k in enumerate(keep):
        depth[i + 1] = depth[i] + k
    idx = [i for i, k in enumerate(keep) if k]
    return ([vars_[i] for i in idx], [extents[i] for i in idx], [kinds[i] for i in idx],
            [depth[g] for g in guards])


def _count(e: Expr, ops: dict[str, int], loads: list[Load]) -> None:
    """Count float arithmetic (a + b*c counts as one fma) and collect loads (not their
    index arithmetic, which ``_access`` counts)."""
    stack = [e]
    while stack:
        x = stack.pop()
        if isinstance(x, Load):
            loads.append(x)
            continue
        if isinstance(x, BinOp):
            if x.dtype != FLOAT:
                ops["int"] += 1
            elif x.op in ("+", "-"):
                fused = next((c for c in (x.a, x.b) if isinstance(c, BinOp) and c.op == "*"
                              and c.dtype == FLOAT), None)
                if fused is not None:
                    ops["fma"] += 1
                    stack.extend(fused.children())
                    stack.append(x.b if fused is x.a else x.a)
                    continue
                ops["add"] += 1
            elif x.op == "*":
                ops["mul"] += 1
            else:
                ops["other"] += 1
        elif isinstance(x, (Select, Cmp)) and (x.dtype == FLOAT or isinstance(x, Cmp)):
            ops["other"] += 1
        stack.extend(x.children())


def _access(buf: Buffer, indices: tuple[Expr, ...], level: dict[Var, int],
            ops: dict[str, int]) -> Access:
    dims: list[tuple[dict[int, int], int]] = []
    opaque: list[frozenset[int]] = []
    for ix in indices:
        # inner=(): every non-affine sub-expression becomes an opaque term of its own
        form = affine(ix, inner=())
        coefs, c = form if form is not None else ({ix: 1}, 0)
        lin: dict[int, int] = {}
        hidden: set[int] = set()
        for v, k in coefs.items():
            if isinstance(v, Var):
                if v in level:
                    lin[level[v]] = k
                continue
            ops["int"] += 3  # a division, a modulo or a product of vars: a few instructions
            stack = [v]
            while stack:
                x = stack.pop()
                if isinstance(x, Var):
                    if x in level:
                        hidden.add(level[x])
                else:
                    stack.extend(x.children())
        ops["int"] += max(0, 2 * len(coefs) - 1 + (c != 0))
        dims.append((lin, c))
        opaque.append(frozenset(hidden))
    return Access(buf, dims, opaque)
