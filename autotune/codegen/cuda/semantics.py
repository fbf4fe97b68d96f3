"""What CUDA C means for our loop AST, in the one place both the emitter and the execution
model (``simulate``) read it: the flat index a kernel computes, where ``//`` and ``%`` are
C's, the width of index arithmetic, and which buffers a statement reads and writes."""
from __future__ import annotations

from autotune.ir.analysis import Interval, interval, simplify, stmt_exprs
from autotune.ir.expr import BinOp, Const, Expr, Load, Var, add, mul, walk
from autotune.ir.stmt import (
    AsyncCopy,
    AtomicAdd,
    Buffer,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    MmaLoad,
    MmaStore,
    PrimFunc,
    Stmt,
    Store,
    TmaLoad,
    Wgmma,
    walk_stmts,
)

INT_LIMIT = 2**31 // 8  # beyond this many elements an overhanging tile index may overflow int
MBARRIER_STMTS = (MbarrierInit, MbarrierArrive, MbarrierWait)


def index_bits(func: PrimFunc) -> int:
    """Width of the kernel's index arithmetic: 64 bits once a buffer is large enough that
    an overhanging tile's index may overflow a 32-bit ``int``."""
    big = max([b.size for b in (*func.args, *func.workspaces)] or [0]) > INT_LIMIT
    return 64 if big else 32


def flat_index(b: Buffer, indices: tuple[Expr, ...], extents: dict[Var, int]) -> Expr:
    """The one-dimensional index the kernel computes for ``b[indices]``."""
    flat: Expr = Const(0)
    for i, stride in zip(indices, b.strides):
        flat = add(flat, mul(i, stride))
    return simplify(flat, extents)


def c_division(e: BinOp, ranges: dict[Var, Interval]) -> bool:
    """Whether ``//`` or ``%`` is printed as C's ``/`` or ``%`` (which round toward zero):
    only where both operands are proven non-negative, the divisor positive."""
    lo, div = interval(e.a, ranges), interval(e.b, ranges)
    return lo is not None and lo[0] >= 0 and div is not None and div[0] > 0


def writes(s: Stmt) -> list[Buffer]:
    """The buffer each writing statement of ``s`` writes (stores, cp.async, mma_store, a
    TMA copy and the barrier it completes on, mbarrier operations, wgmma accumulators; an
    atomic writes its element and its result)."""
    out = []
    for x in walk_stmts(s):
        if isinstance(x, Store):
            out.append(x.buffer)
        elif isinstance(x, (AsyncCopy, MmaStore)):
            out.append(x.dst)
        elif isinstance(x, AtomicAdd):
            out += [x.buffer, x.result]
        elif isinstance(x, TmaLoad):
            out += [x.dst, x.bar]
        elif isinstance(x, MBARRIER_STMTS):
            out.append(x.bar)
        elif isinstance(x, Wgmma):
            out.append(x.acc)
    return out


def reads(s: Stmt) -> list[Buffer]:
    """The buffers ``s`` reads: loads, cp.async and TMA sources, mma_load and wgmma
    operands, atomics, waited barriers."""
    out = [e.buffer for top in stmt_exprs(s) for e in walk(top) if isinstance(e, Load)]
    out += [x.src for x in walk_stmts(s) if isinstance(x, (AsyncCopy, MmaLoad))]
    out += [x.buffer for x in walk_stmts(s) if isinstance(x, AtomicAdd)]
    for x in walk_stmts(s):
        if isinstance(x, TmaLoad):
            out.append(x.tmap.buffer)
        elif isinstance(x, Wgmma):
            out += [x.a.buffer, x.b.buffer, x.acc]
        elif isinstance(x, MbarrierWait):
            out.append(x.bar)
    return out


def written_buffers(s: Stmt) -> set[Buffer]:
    """Buffers some statement of ``s`` writes: the kernel parameters that are not
    ``const``."""
    return set(writes(s))
