"""Loop-AST rewrites that prepare a PrimFunc for CUDA C: launch dimensions, hoisted shared
buffers, guards normalised and kept away from barriers.

After ``prepare`` every blockIdx/threadIdx loop spans its full launch dimension (a narrower
one gets an explicit ``idx < extent`` guard), no ``Sync`` sits under a guard that depends on
a thread index (such guards are pushed inside, around the statements between barriers, but
never around a cooperative fill of shared memory, and never around a warp-collective Mma
statement: that is an error), and guards proven true by interval bounds are gone. cp.async
and mma_store count as writes, mma_load as a read, wherever barriers are placed or dropped.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Iterable, Mapping

from autotune.codegen.cuda.semantics import reads, writes
from autotune.ir.analysis import Interval, decide, map_stmt_exprs, stmt_exprs, substitute
from autotune.ir.expr import And, Const, Expr, Load, Var, cmp, walk
from autotune.ir.stmt import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    MmaFill,
    MmaLoad,
    MmaStore,
    MmaSync,
    PrimFunc,
    Scope,
    Seq,
    SetMaxNReg,
    Stmt,
    Sync,
    TensorMap,
    TmaLoad,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
    walk_stmts,
)
from autotune.ir.visitor import StmtMutator
from autotune.ops.dtypes import element_bytes


class CudaCodegenError(ValueError):
    """The loop AST cannot become a correct CUDA kernel (e.g. a barrier in divergent code)."""


@dataclass(frozen=True)
class TensorMapSpec:
    """What the host needs to encode one TMA descriptor at launch: the kernel argument it
    describes (its index among the arguments), that argument's dtype and shape, the box
    and the swizzle (bytes), all outermost dimension first."""

    arg: int
    dtype: str
    shape: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int
    element_strides: tuple[int, ...] = ()  # () means 1 along every dimension

    def to_dict(self) -> dict:
        out = {"arg": self.arg, "dtype": self.dtype, "shape": list(self.shape),
               "box": list(self.box), "swizzle": self.swizzle}
        if self.element_strides:
            out["element_strides"] = list(self.element_strides)
        return out

    @staticmethod
    def from_dict(d: Mapping) -> "TensorMapSpec":
        return TensorMapSpec(int(d["arg"]), str(d["dtype"]), tuple(d["shape"]),
                             tuple(d["box"]), int(d["swizzle"]),
                             tuple(d.get("element_strides", ())))


@dataclass(frozen=True)
class Launch:
    """Launch configuration: grid and block dims (x, y, z), static and dynamic shared
    bytes, and the TMA descriptors the kernel takes first among its parameters."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    dynamic_shared_bytes: int = 0
    tensor_maps: tuple[TensorMapSpec, ...] = ()

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def to_dict(self) -> dict:
        out = {"grid": list(self.grid), "block": list(self.block),
               "shared_bytes": self.shared_bytes,
               "dynamic_shared_bytes": self.dynamic_shared_bytes}
        if self.tensor_maps:
            out["tensor_maps"] = [m.to_dict() for m in self.tensor_maps]
        return out


def tensor_maps(func: PrimFunc) -> list[TensorMap]:
    """The TMA descriptors ``func`` copies through, in order of first use (the kernel's
    leading parameters)."""
    return list(dict.fromkeys(x.tmap for x in walk_stmts(func.body) if isinstance(x, TmaLoad)))


def tensor_map_specs(func: PrimFunc) -> tuple[TensorMapSpec, ...]:
    """`TensorMapSpec` of each of ``func``'s descriptors; CudaCodegenError when one
    describes no argument of ``func`` (the host encodes them from argument pointers)."""
    specs = []
    for m in tensor_maps(func):
        if m.buffer not in func.args:
            raise CudaCodegenError(f"tensor map {m.name} describes {m.buffer.name}, which is "
                                   "not an argument of the kernel")
        strided = m.element_strides if any(e != 1 for e in m.element_strides) else ()
        specs.append(TensorMapSpec(func.args.index(m.buffer), m.buffer.dtype, m.buffer.shape,
                                   m.box, m.swizzle, strided))
    return tuple(specs)


_BLOCK = (ForKind.BLOCK_X, ForKind.BLOCK_Y, ForKind.BLOCK_Z)
_THREAD = (ForKind.THREAD_X, ForKind.THREAD_Y, ForKind.THREAD_Z)
_LAUNCH_KINDS = (*_BLOCK, *_THREAD)


STATIC_SHARED_LIMIT = 49152  # bytes of static __shared__ arrays a block may declare
DYNAMIC_SHARED_ALIGN = 128    # each buffer's offset in the dynamic shared block
# A TMA destination repeats its swizzle pattern every 1024 bytes, and wgmma descriptors
# address it as if it started on such a boundary: those buffers (and the dynamic block's
# base, aligned in the kernel itself: DYNAMIC_BASE_SLACK extra bytes) are 1024-aligned.
SWIZZLE_ALIGN = 1024
DYNAMIC_BASE_SLACK = SWIZZLE_ALIGN


def launch_of(func: PrimFunc, static_limit: int = STATIC_SHARED_LIMIT) -> Launch:
    """Grid/block dims (the largest extent bound to each tag) and shared bytes of ``func``:
    static, or, past ``static_limit``, all of them dynamic (see `dynamic_shared_layout`)."""
    dims = {k: 1 for k in (*_BLOCK, *_THREAD)}
    shared = 0
    for s in walk_stmts(func.body):
        if isinstance(s, For) and s.kind in dims:
            dims[s.kind] = max(dims[s.kind], s.extent)
        elif isinstance(s, Allocate) and s.buffer.scope is Scope.SHARED:
            shared += -(-_nbytes(s.buffer) // 16) * 16  # declared 16-byte aligned (or more)
    grid = tuple(dims[k] for k in _BLOCK)
    block = tuple(dims[k] for k in _THREAD)
    maps = tensor_map_specs(func)
    if shared > static_limit or maps:
        # a TMA kernel's tiles are always dynamic: its base is aligned in the kernel
        _, dynamic = dynamic_shared_layout(func.body)
        slack = DYNAMIC_BASE_SLACK if maps else 0
        return Launch(grid, block, 0, dynamic + slack, maps)  # type: ignore[arg-type]
    return Launch(grid, block, shared)  # type: ignore[arg-type]


def dynamic_shared_layout(s: Stmt) -> tuple[dict[Buffer, int], int]:
    """Byte offset of each shared buffer of ``s`` in one dynamic shared block (in order of
    allocation, each 128-byte aligned: wmma and cp.async need 32 and 16; a TMA destination
    1024-byte aligned) and its size."""
    swizzled = {x.dst for x in walk_stmts(s) if isinstance(x, TmaLoad)}
    offsets: dict[Buffer, int] = {}
    end = 0
    for b in dict.fromkeys(shared_buffers(s)):
        align = SWIZZLE_ALIGN if b in swizzled else DYNAMIC_SHARED_ALIGN
        end = -(-end // align) * align
        offsets[b] = end
        end += -(-_nbytes(b) // DYNAMIC_SHARED_ALIGN) * DYNAMIC_SHARED_ALIGN
    return offsets, end


def _nbytes(b: Buffer) -> int:
    return b.size * element_bytes(b.dtype)


def contains_sync(s: Stmt) -> bool:
    return any(isinstance(x, Sync) for x in walk_stmts(s))


WARP_COLLECTIVE = (MmaFill, MmaLoad, MmaSync, MmaStore)
# collective over a warpgroup (4 warps): legal under a guard uniform across warpgroups only
WARPGROUP_COLLECTIVE = (Wgmma, WgmmaFence, WgmmaCommit, WgmmaWait, SetMaxNReg)


def shared_buffers(s: Stmt) -> list[Buffer]:
    return [x.buffer for x in walk_stmts(s)
            if isinstance(x, Allocate) and x.buffer.scope is Scope.SHARED]


def prepare(func: PrimFunc, launch: Launch) -> Stmt:
    """The kernel body, rewritten as described in the module docstring."""
    check_stages(func, launch)
    dims = dict(zip(_BLOCK, launch.grid)) | dict(zip(_THREAD, launch.block))
    body = _Normalizer(dims).visit(func.body)
    body = _BarrierFixer().visit(body)
    return _IdleSyncs().visit(_DedupeSyncs().visit(body))


def check_stages(func: PrimFunc, launch: Launch) -> None:
    """Raise CudaCodegenError when the root stages cannot share one launch: a stage that
    reads what an earlier one wrote to global memory (that needs a grid-wide barrier), or
    an unbound stage in a multi-thread launch (every thread would run all of it)."""
    roots = func.body.stmts if isinstance(func.body, Seq) else (func.body,)
    written: set[Buffer] = set()
    for s in roots:
        read = set(reads(s))
        clash = sorted(b.name for b in read & written)
        if clash:
            raise CudaCodegenError(f"{func.name}: a stage reads {', '.join(clash)} written by "
                                   "an earlier stage; that needs a grid-wide barrier")
        bound = any(isinstance(x, For) and x.kind.is_thread_binding for x in walk_stmts(s))
        if not bound and launch.threads * prod(launch.grid) > 1:
            raise CudaCodegenError(f"{func.name}: a stage has no blockIdx/threadIdx loop, so "
                                   "every thread would run all of it; bind its loops")
        written |= {b for b in writes(s) if b.scope is Scope.GLOBAL}


# ---------------------------------------------------------------- bounds and guards

def conjuncts(c: Expr) -> list[Expr]:
    return conjuncts(c.a) + conjuncts(c.b) if isinstance(c, And) else [c]


class _Normalizer(StmtMutator):
    """Full-width launch loops, guards that the ranges decide removed, repeated ones merged
    (``ranges`` and ``known``: the enclosing loops' and guards')."""

    def __init__(self, dims: Mapping[ForKind, int]):
        self.dims = dims
        self.ranges: dict[Var, Interval] = {}
        self.known: frozenset[Expr] = frozenset()

    def visit_for(self, s: For) -> Stmt:
        full = self.dims.get(s.kind)
        if s.extent == 1 and full in (None, 1):  # a one-trip loop: its index is 0
            zero = {s.var: Const(0)}
            return self.visit(map_stmt_exprs(s.body, lambda e: substitute(e, zero)))
        outer = self.ranges
        self.ranges = {**outer, s.var: (0, s.extent - 1)}
        body = self.visit(s.body)
        self.ranges = outer
        if full is not None and s.extent < full:
            # the loop is a launch index: threads past its extent skip the body
            return For(s.var, full, s.kind, IfThenElse(cmp("<", s.var, s.extent), body))
        return For(s.var, s.extent, s.kind, body)

    def visit_if(self, s: IfThenElse) -> Stmt:
        if s.else_ is not None:
            return super().visit_if(s)
        keep = [c for c in conjuncts(s.cond)
                if c not in self.known and decide(c, self.ranges) is not True]
        if any(decide(c, self.ranges) is False for c in keep):
            return Seq([])
        outer = self.known
        self.known = outer | frozenset(keep)
        body = self.visit(s.then)
        self.known = outer
        for c in reversed(keep):
            body = IfThenElse(c, body)
        return body


# ---------------------------------------------------------------- barriers

def _uses_thread_var(c: Expr, thread_vars: set[Var]) -> bool:
    return any(isinstance(x, Var) and x in thread_vars for x in walk(c))


class _BarrierFixer(StmtMutator):
    """Push thread-dependent guards that enclose a ``Sync`` inside, bottom-up
    (``thread_vars``: the enclosing threadIdx loops' variables)."""

    def __init__(self) -> None:
        self.thread_vars: set[Var] = set()

    def visit_for(self, s: For) -> Stmt:
        if s.kind not in _THREAD:
            return super().visit_for(s)
        outer = self.thread_vars
        self.thread_vars = outer | {s.var}
        body = self.visit(s.body)
        self.thread_vars = outer
        return For(s.var, s.extent, s.kind, body)

    def visit_if(self, s: IfThenElse) -> Stmt:
        then = self.visit(s.then)
        els = None if s.else_ is None else self.visit(s.else_)
        divergent = _uses_thread_var(s.cond, self.thread_vars)
        if not divergent or not (contains_sync(then) or (els is not None and contains_sync(els))):
            return IfThenElse(s.cond, then, els)
        if els is not None or any(isinstance(x, Load) for x in walk(s.cond)):
            raise CudaCodegenError("a barrier sits under a thread-dependent if/else")
        tested = frozenset(x for x in walk(s.cond)
                           if isinstance(x, Var) and x in self.thread_vars)
        return _GuardPusher(s.cond, tested).visit(then)


class _GuardPusher(StmtMutator):
    """``if (cond) s`` with the guard moved inside so that every thread reaches each
    barrier; ``cond`` depends only on enclosing loop indices, so it is the same wherever it
    is tested.

    A cooperative fill of shared memory between the barriers (a statement that writes
    shared memory only, spread over the block by thread loops of its own, so that it reads
    none of ``threads``, the thread indices ``cond`` tests) is left unguarded: ``cond``
    bounds the computation around it (a tile's tail, a narrower thread loop), and the
    threads that ``cond`` keeps read what the others fill. A fill's loads carry their own
    bounds."""

    def __init__(self, cond: Expr, threads: frozenset[Var]):
        self.cond, self.threads = cond, threads

    def visit(self, s: Stmt) -> Stmt:
        if contains_sync(s):
            return super().visit(s)
        if is_shared_fill(s) and not self.threads & _vars_of(s):
            return s
        if any(isinstance(x, WARP_COLLECTIVE) for x in walk_stmts(s)):
            # the guard tests a thread index: it may split a warp
            raise CudaCodegenError("a warp-collective Mma statement would sit under a "
                                   "thread-dependent guard")
        return IfThenElse(self.cond, s)

    def visit_if(self, s: IfThenElse) -> Stmt:
        if s.else_ is not None:
            raise CudaCodegenError("cannot move a guard past IfThenElse")
        return IfThenElse(s.cond, self.visit(s.then))

    def visit_leaf(self, s: Stmt) -> Stmt:
        if isinstance(s, Sync):
            return s
        raise CudaCodegenError(f"cannot move a guard past {type(s).__name__}")


def _vars_of(s: Stmt) -> set[Var]:
    return {x for top in stmt_exprs(s) for x in walk(top) if isinstance(x, Var)}


def is_shared_fill(s: Stmt) -> bool:
    """Whether ``s`` writes shared memory and nothing else (a cooperative fill, by stores
    or cp.async)."""
    written = writes(s)
    return (bool(written) and all(b.scope is Scope.SHARED for b in written)
            and not any(isinstance(x, WARP_COLLECTIVE) for x in walk_stmts(s)))


class _DedupeSyncs(StmtMutator):
    """Splice shared allocations into their sequence (CUDA C declares them at function
    scope) and drop a barrier that directly follows another (nested caches end in two)."""

    def visit_seq(self, s: Seq) -> Stmt:
        out: list[Stmt] = []
        for c in _flatten_shared(s.stmts):
            c = self.visit(c)
            if isinstance(c, Sync) and out and isinstance(out[-1], Sync):
                continue
            if isinstance(c, Seq) and not c.stmts:
                continue
            out.append(c)
        return Seq(out)

    def visit_allocate(self, s: Allocate) -> Stmt:
        if s.buffer.scope is Scope.SHARED:
            return self.visit(Seq([s.body]))
        return super().visit_allocate(s)


def _touches_shared(s: Stmt) -> bool:
    return any(b.scope is Scope.SHARED for b in writes(s)) or any(
        b.scope is Scope.SHARED for b in reads(s))


class _IdleSyncs(StmtMutator):
    """Drop barriers after which no shared memory is touched (``later``: whether something
    after the statement visited, or a later trip of an enclosing loop, touches it)."""

    def __init__(self) -> None:
        self.later = False

    def visit_seq(self, s: Seq) -> Stmt:
        outer = self.later
        out: list[Stmt] = []
        for c in reversed(s.stmts):
            if isinstance(c, Sync) and not self.later:
                continue
            out.append(self.visit(c))
            self.later = self.later or _touches_shared(c)
        self.later = outer
        return Seq(out[::-1])

    def visit_for(self, s: For) -> Stmt:
        # a launch index is no loop: each thread runs one trip
        again = s.kind not in _LAUNCH_KINDS and s.extent > 1 and _touches_shared(s.body)
        outer = self.later
        self.later = outer or again
        body = self.visit(s.body)
        self.later = outer
        return For(s.var, s.extent, s.kind, body)


def _flatten_shared(stmts: Iterable[Stmt]) -> list[Stmt]:
    """``stmts`` with each shared allocation (nested ones too) replaced by its body's
    statements."""
    out: list[Stmt] = []
    todo = list(stmts)[::-1]
    while todo:
        c = todo.pop()
        if isinstance(c, Allocate) and c.buffer.scope is Scope.SHARED:
            todo.extend((c.body.stmts if isinstance(c.body, Seq) else (c.body,))[::-1])
        else:
            out.append(c)
    return out
