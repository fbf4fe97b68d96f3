"""An execution model of the CUDA kernels we generate, for machines without a GPU.

It runs the kernel body after every CUDA pass (``compiler.prepare_kernel``: the statements
the emitter prints one for one, with the emitter's own index flattening, C division and
index width) for every thread of the grid, in lockstep on numpy arrays: a lane per thread,
an ``if`` a mask, a block's threads one barrier phase at a time. Where a GPU would silently
compute garbage it raises ``CudaExecutionError``:

- ``uninitialized``: a read of shared memory, a register array, or the output that no
  thread wrote (shared memory and registers start as poison);
- ``race``: an element written by one thread and read or written by another in the same
  barrier phase (shared memory), or anywhere in the launch (global memory: our kernels
  never communicate through it);
- ``out_of_bounds``: an index outside its buffer;
- ``divergent_barrier``: a ``__syncthreads()`` that only some threads of a block reach;
- ``int_overflow`` / ``division_by_zero``: index arithmetic a 32-bit ``int`` cannot hold,
  or a division by zero;
- the tensor-core and ``cp.async`` statements' own kinds, ``divergent_warp``,
  ``nonuniform_warp``, ``misaligned``, ``async_pending`` and ``invalid_statement`` (see
  ``simulate_warp``, which runs them);
- ``counter_not_reset``, and the exception to the global ``race``: a read of what another
  block wrote and published by a fence and an atomic the reader's block acquired (see
  ``simulate_sync``, which runs fences and atomics);
- the Hopper statements' kinds (TMA, mbarriers, wgmma, setmaxnreg: ``simulate_hopper``).

A kernel with Hopper statements runs each warpgroup (the same one of every block in the
chunk) as a coroutine of its own, switching where one waits on an mbarrier
(``simulate_roles``): its producer and consumers meet only there. A ``__syncthreads()``
then waits for every warpgroup.

Blocks run in chunks, each chunk's in lockstep, in index order or in a given order (so the
block that arrives last at a split-K counter need not be the highest one). Workspaces may
be passed in (``scratch``) to keep their contents from one launch to the next, as a loaded
kernel does.

float16 and bfloat16 buffers arrive and leave in storage form (``ops.dtypes``); inside, the
model holds their exact values as float32 and rounds each store into them.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from math import prod
from typing import TYPE_CHECKING, Callable, Sequence, Union

import numpy as np

from autotune.codegen.cuda.emit import c_division, flat_index, index_bits, written_buffers
from autotune.codegen.cuda.hopper import HOPPER_STMTS
from autotune.codegen.cuda.passes import Launch, shared_buffers
from autotune.codegen.cuda.simulate_error import CudaExecutionError
from autotune.codegen.cuda.simulate_hopper import hopper_stmt
from autotune.codegen.cuda.simulate_hopper_state import HopperPlan, HopperState
from autotune.ir.analysis import Interval, loop_extents
from autotune.ir.expr import FLOAT, HALF_DTYPES, And, BinOp, Cmp, Const, Expr, Load, Select, Var
from autotune.ir.stmt import (
    Allocate,
    AtomicAdd,
    Buffer,
    Fence,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Scope,
    Seq,
    Stmt,
    Store,
    Sync,
    format_stmt,
)
from autotune.ops.dtypes import round_to, to_float32, to_storage

if TYPE_CHECKING:
    from autotune.codegen.cuda.simulate_sync import Ordering
    from autotune.codegen.cuda.simulate_warp import FragmentType, WarpState

Value = Union[int, float, np.ndarray]  # a uniform value, or one per lane
_Env = dict[Var, Value]
_ExprFn = Callable[["_Grid", _Env, np.ndarray], Value]
_StmtFn = Callable[["_Grid", _Env, np.ndarray], None]

MAX_LANES = 1 << 15  # threads simulated at once (blocks are run in chunks of this size)
# Hopper kernels keep per-element records of their async shared memory: smaller chunks
HOPPER_MAX_LANES = 1 << 12
_NONE = np.iinfo(np.int64).max
_LAUNCH = {ForKind.BLOCK_X: ("block", 0), ForKind.BLOCK_Y: ("block", 1),
           ForKind.BLOCK_Z: ("block", 2), ForKind.THREAD_X: ("thread", 0),
           ForKind.THREAD_Y: ("thread", 1), ForKind.THREAD_Z: ("thread", 2)}


@dataclass(frozen=True)
class _Memory:
    """One buffer of the launch: values, which elements hold a written value, and who
    touched each element in the current phase (lowest and highest thread id)."""

    buffer: Buffer
    data: np.ndarray
    written: np.ndarray | None  # None: every element is defined (a kernel input)
    tracked: bool               # race tracking (shared and global; registers are private)
    wmin: np.ndarray
    wmax: np.ndarray
    rmin: np.ndarray
    rmax: np.ndarray

    @staticmethod
    def new(buffer: Buffer, data: np.ndarray, defined: bool, tracked: bool) -> "_Memory":
        n = data.size if tracked else 0
        lo: np.ndarray = np.full(n, _NONE, np.int64)
        hi: np.ndarray = np.full(n, -1, np.int64)
        return _Memory(buffer, data, None if defined else np.zeros(data.size, bool), tracked,
                       lo, hi.copy(), lo.copy(), hi.copy())

    def new_phase(self, rows: np.ndarray | slice) -> None:
        """Forget who touched the elements of ``rows`` (a barrier ordered them)."""
        size = self.buffer.size
        for arr, fill in ((self.wmin, _NONE), (self.wmax, -1), (self.rmin, _NONE),
                          (self.rmax, -1)):
            arr.reshape(-1, size)[rows] = fill


class _Grid:
    """The lanes of one chunk of blocks and every buffer they see."""

    def __init__(self, launch: Launch, block_ids: np.ndarray, globals_: dict[Buffer, _Memory],
                 shared: Sequence[Buffer], index_bits: int, order: Ordering | None = None):
        gx, gy, _ = launch.grid
        bx, by, _ = launch.block
        self.launch = launch
        self.threads = launch.threads
        self.blocks = blocks = len(block_ids)
        self.lanes = blocks * self.threads
        lane: np.ndarray = np.arange(self.lanes, dtype=np.int64)
        self.local_block: np.ndarray = lane // self.threads           # block within the chunk
        self.tid: np.ndarray = lane % self.threads                     # thread id within its block
        gblock: np.ndarray = block_ids[self.local_block]
        self.gtid = gblock * self.threads + self.tid       # thread id within the grid
        self.index: dict[tuple[str, int], np.ndarray] = {
            ("block", 0): gblock % gx, ("block", 1): gblock // gx % gy,
            ("block", 2): gblock // (gx * gy),
            ("thread", 0): self.tid % bx, ("thread", 1): self.tid // bx % by,
            ("thread", 2): self.tid // (bx * by)}
        self.memory: dict[Buffer, _Memory] = dict(globals_)
        for b in shared:
            data: np.ndarray = np.zeros(blocks * b.size, np.float32)
            self.memory[b] = _Memory.new(b, data, defined=False, tracked=True)
        self.int_max = (1 << (index_bits - 1)) - 1
        self.warps: WarpState | None = None  # warps and cp.async groups, made on first use
        self.order = order  # fences and atomics (None: the kernel has none)
        self.phase: np.ndarray = np.zeros(blocks, np.int64)  # barriers each block passed
        self.hopper: HopperState | None = None  # a warp-specialized kernel's own state

    def coords(self, lane: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(blockIdx, threadIdx) of ``lane``."""
        b = tuple(int(self.index[("block", d)][lane]) for d in range(3))
        t = tuple(int(self.index[("thread", d)][lane]) for d in range(3))
        return b, t  # type: ignore[return-value]

    def thread_of(self, scope: Scope, owner: int, lane: int
                  ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(blockIdx, threadIdx) of a thread id recorded by race tracking."""
        if scope is Scope.SHARED:  # a thread of ``lane``'s block
            lane = int(self.local_block[lane]) * self.threads + owner
            return self.coords(lane)
        block, tid = divmod(owner, self.threads)
        gx, gy, _ = self.launch.grid
        bx, by, _ = self.launch.block
        return ((block % gx, block // gx % gy, block // (gx * gy)),
                (tid % bx, tid // bx % by, tid // (bx * by)))


def run_kernel(func: PrimFunc, body: Stmt, launch: Launch, arrays: Sequence[np.ndarray],
               max_lanes: int = MAX_LANES, *, block_order: Sequence[int] | None = None,
               scratch: Sequence[np.ndarray] | None = None) -> None:
    """Run a prepared kernel body (``compiler.prepare_kernel``) with ``launch`` on numpy
    arrays (``func.args`` order: inputs, then the output, which is written in place).
    ``block_order``: the linear block ids in the order they run (default: ascending).
    ``scratch``: one float32 array per workspace, read and updated in place (default: a
    zeroed one per call)."""
    from autotune.codegen.cuda.simulate_sync import (
        Ordering,
        check_counters,
        counters_of,
        uses_ordering,
    )
    if len(arrays) != len(func.args):
        raise ValueError(f"{func.name} takes {len(func.args)} arrays, got {len(arrays)}")
    program = _Compiler(func, body).stmt(body)
    stored = written_buffers(body)  # by Store, MmaStore or AsyncCopy
    globals_: dict[Buffer, _Memory] = {}
    for b, a in zip(func.args, arrays):
        if a.size != b.size:
            raise ValueError(f"{b.name}: {a.size} elements given, the kernel takes {b.size}")
        data = np.array(to_float32(np.asarray(a), b.dtype) if b.dtype in HALF_DTYPES else a,
                        dtype=np.float32).reshape(-1)
        globals_[b] = _Memory.new(b, data, defined=b not in stored, tracked=b in stored)
    if scratch is None:
        scratch = [np.zeros(w.size, np.float32) for w in func.workspaces]
    if len(scratch) != len(func.workspaces):
        raise ValueError(f"{func.name} has {len(func.workspaces)} workspaces, "
                         f"{len(scratch)} scratch arrays given")
    for w, data in zip(func.workspaces, scratch):
        if data.dtype != np.float32 or data.size != w.size:
            raise ValueError(f"{w.name}: scratch must be {w.size} float32 elements")
        # (a workspace read before this launch wrote it is still an uninitialized read)
        globals_[w] = _Memory.new(w, data.reshape(-1), defined=False, tracked=True)
    shared = list(dict.fromkeys(shared_buffers(func.body)))
    blocks = prod(launch.grid)
    order: np.ndarray = (np.arange(blocks, dtype=np.int64) if block_order is None
                         else np.asarray(block_order, dtype=np.int64))
    if sorted(order.tolist()) != list(range(blocks)):
        raise ValueError(f"block_order must be a permutation of the {blocks} block ids")
    counters = counters_of(body)
    ordering = Ordering(globals_, counters) if uses_ordering(body) else None
    plan = HopperPlan.of(func, body)
    if plan is not None:
        max_lanes = min(max_lanes, HOPPER_MAX_LANES)
    per_chunk = max(1, max_lanes // launch.threads)
    bits = index_bits(func)
    for first in range(0, blocks, per_chunk):
        grid = _Grid(launch, order[first:first + per_chunk], globals_, shared, bits, ordering)
        if plan is None:
            program(grid, {}, np.ones(grid.lanes, bool))
            continue
        # warpgroups synchronise through mbarriers: each runs as a coroutine of its own
        grid.hopper = HopperState(plan, grid)
        grid.hopper.run(partial(_run_lanes, program, grid), partial(_barrier, grid))
    check_counters(globals_, counters)
    out, out_buf = arrays[-1], func.args[-1]
    mem = globals_[out_buf]
    data = to_storage(mem.data, out_buf.dtype) if out_buf.dtype in HALF_DTYPES else mem.data
    out[...] = data.reshape(out.shape).astype(out.dtype)


def _run_lanes(program: _StmtFn, g: _Grid, mask: np.ndarray) -> None:
    program(g, {}, mask)


class _Compiler:
    """Turns statements and expressions into closures over (grid, env, mask), once."""

    def __init__(self, func: PrimFunc, body: Stmt):
        self.func = func
        self.ext = loop_extents(body)
        self.ranges: dict[Var, Interval] = {v: (0, n - 1) for v, n in self.ext.items()}
        self.context = ""  # the statement being compiled, named in errors
        self.fragments: dict[Buffer, FragmentType] = {}  # fragment buffers in scope

    def _text(self, s: Stmt) -> str:
        return format_stmt(s)[0].strip()

    @staticmethod
    def access(g: _Grid, mem: _Memory, index: np.ndarray, lanes: np.ndarray, write: bool,
               text: str) -> np.ndarray:
        """Check a plain access (``_access``), for statements compiled elsewhere."""
        return _access(g, mem, index, lanes, write, text)

    # ------------------------------------------------------------------ statements
    def stmt(self, s: Stmt) -> _StmtFn:
        if isinstance(s, Seq):
            return self._seq([self.stmt(c) for c in s.stmts])
        if isinstance(s, For):
            return self._for(s)
        if isinstance(s, Store):
            return self._store(s)
        if isinstance(s, Allocate) and not s.buffer.scope.is_fragment:
            return self._allocate(s)
        if isinstance(s, IfThenElse):
            return self._if(s)
        if isinstance(s, Sync):
            return self._sync(s)
        if isinstance(s, HOPPER_STMTS):
            return hopper_stmt(self, s)
        # (these modules import this one)
        from autotune.codegen.cuda.simulate_sync import atomic_stmt, fence_stmt
        if isinstance(s, Fence):
            return fence_stmt(self, s)
        if isinstance(s, AtomicAdd):
            return atomic_stmt(self, s)
        from autotune.codegen.cuda.simulate_warp import warp_stmt
        return warp_stmt(self, s)

    @staticmethod
    def _seq(parts: list[_StmtFn]) -> _StmtFn:
        def run(g: _Grid, env: _Env, mask: np.ndarray) -> None:
            for p in parts:
                p(g, env, mask)
        return run

    def _for(self, s: For) -> _StmtFn:
        body, var, extent = self.stmt(s.body), s.var, s.extent
        launch = _LAUNCH.get(s.kind)
        if launch is not None:  # printed as `const int v = threadIdx.x;` whatever the extent
            def bind(g: _Grid, env: _Env, mask: np.ndarray) -> None:
                env[var] = g.index[launch]
                body(g, env, mask)
            return bind

        def loop(g: _Grid, env: _Env, mask: np.ndarray) -> None:
            for i in range(extent):
                env[var] = i
                body(g, env, mask)
        return loop

    def _allocate(self, s: Allocate) -> _StmtFn:
        body, buf = self.stmt(s.body), s.buffer
        if buf.scope is Scope.SHARED:  # declared at function scope, one per block
            return body

        def alloc(g: _Grid, env: _Env, mask: np.ndarray) -> None:
            # a register array declared here holds poison, whatever an earlier trip left
            # (in the declaring threads: a coroutine's other warpgroups keep theirs)
            mem = g.memory.get(buf)
            if mem is None:
                g.memory[buf] = _Memory.new(buf, np.zeros(g.lanes * buf.size, np.float32),
                                            defined=False, tracked=False)
            else:
                assert mem.written is not None
                mem.written.reshape(g.lanes, buf.size)[mask] = False
            if g.hopper is not None:
                g.hopper.allocated(buf, mask)
            body(g, env, mask)
        return alloc

    def _if(self, s: IfThenElse) -> _StmtFn:
        self.context = self._text(IfThenElse(s.cond, Seq([])))
        cond = self.expr(s.cond)
        then = self.stmt(s.then)
        els = None if s.else_ is None else self.stmt(s.else_)

        def branch(g: _Grid, env: _Env, mask: np.ndarray) -> None:
            c: np.ndarray = _lanes(cond(g, env, mask), g.lanes).astype(bool)
            inside = mask & c
            if inside.any():
                then(g, env, inside)
            if els is not None:
                outside = mask & ~c
                if outside.any():
                    els(g, env, outside)
        return branch

    def _sync(self, s: Sync) -> _StmtFn:
        def sync(g: _Grid, env: _Env, mask: np.ndarray) -> None:
            if g.hopper is not None:  # the scheduler passes it once every warpgroup is there
                g.hopper.sync(mask)
            else:
                _barrier(g, mask)
        return sync

    def _store(self, s: Store) -> _StmtFn:
        text = self.context = self._text(s)
        write = self.stmt_store(s.buffer, s.indices, text)
        value = self.expr(s.value)

        def store(g: _Grid, env: _Env, mask: np.ndarray) -> None:
            write(g, env, mask, value(g, env, mask))
        return store

    def stmt_store(self, buf: Buffer, indices: tuple[Expr, ...], text: str
                   ) -> Callable[[_Grid, _Env, np.ndarray, Value], None]:
        """What a store to ``buf[indices]`` of a value (per lane) does."""
        index = self.expr(flat_index(buf, indices, self.ext))
        half = buf.dtype if buf.dtype in HALF_DTYPES else None

        def store(g: _Grid, env: _Env, mask: np.ndarray, value: Value) -> None:
            v = _lanes(value, g.lanes)
            lanes: np.ndarray = np.nonzero(mask)[0]
            mem = g.memory[buf]
            keys = _access(g, mem, _lanes(index(g, env, mask), g.lanes)[lanes], lanes,
                           True, text)
            mem.data[keys] = v[lanes] if half is None else round_to(v[lanes], half)
            if mem.written is not None:
                mem.written[keys] = True
        return store

    # ------------------------------------------------------------------ expressions
    def expr(self, e: Expr) -> _ExprFn:
        if isinstance(e, Var):
            var = e
            return lambda g, env, mask: env[var]
        if isinstance(e, Const):
            c: Value = float(np.float32(e.value)) if e.dtype == FLOAT else int(e.value)
            return lambda g, env, mask: c
        if isinstance(e, Load):
            return self._load(e)
        if isinstance(e, Select):
            return self._select(e)
        if isinstance(e, And):  # && evaluates its right side only where the left holds
            a, b = self.expr(e.a), self.expr(e.b)

            def both(g: _Grid, env: _Env, mask: np.ndarray) -> Value:
                left: np.ndarray = _lanes(a(g, env, mask), g.lanes).astype(bool)
                sub = mask & left
                if not sub.any():
                    return left & False
                return left & _lanes(b(g, env, sub), g.lanes).astype(bool)
            return both
        if isinstance(e, Cmp):
            return self._cmp(e)
        if isinstance(e, BinOp):
            return self._binop(e)
        raise TypeError(f"unknown expression {type(e).__name__}")

    def _load(self, e: Load) -> _ExprFn:
        buf = e.buffer
        index = self.expr(flat_index(buf, e.indices, self.ext))
        text = self.context

        def load(g: _Grid, env: _Env, mask: np.ndarray) -> Value:
            lanes = np.nonzero(mask)[0]
            out: np.ndarray = np.zeros(g.lanes, np.float32)
            if lanes.size:
                mem = g.memory[buf]
                keys = _access(g, mem, _lanes(index(g, env, mask), g.lanes)[lanes], lanes,
                               False, text)
                out[lanes] = mem.data[keys]
            return out
        return load

    def _select(self, e: Select) -> _ExprFn:
        cond, t, f = self.expr(e.cond), self.expr(e.t), self.expr(e.f)

        def select(g: _Grid, env: _Env, mask: np.ndarray) -> Value:
            c: np.ndarray = _lanes(cond(g, env, mask), g.lanes).astype(bool)
            yes, no = mask & c, mask & ~c
            tv = t(g, env, yes) if yes.any() else 0
            fv = f(g, env, no) if no.any() else 0
            return np.where(c, tv, fv)
        return select

    def _cmp(self, e: Cmp) -> _ExprFn:
        a, b, op = self.expr(e.a), self.expr(e.b), _CMP[e.op]
        return lambda g, env, mask: op(a(g, env, mask), b(g, env, mask))

    def _binop(self, e: BinOp) -> _ExprFn:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.dtype == FLOAT:
            op = _FLOAT_OPS[e.op]
            return lambda g, env, mask: op(a(g, env, mask), b(g, env, mask))
        if e.op in ("//", "%"):
            div = _divide(e.op, c_division(e, self.ranges))
        else:
            div = _INT_OPS[e.op]
        text = f"integer {e.op}"

        def arith(g: _Grid, env: _Env, mask: np.ndarray) -> Value:
            x, y = a(g, env, mask), b(g, env, mask)
            if e.op in ("//", "%"):
                zero = np.asarray(y == 0) & mask if np.ndim(y) else bool(y == 0)
                if np.any(zero):
                    lane = int(np.argmax(np.broadcast_to(zero, (g.lanes,))))
                    blk, thr = g.coords(lane)
                    raise CudaExecutionError("division_by_zero", f"{text} by zero",
                                             block=blk, thread=thr)
                y = np.where(y == 0, 1, y) if np.ndim(y) else y
            r = div(x, y)
            _check_int(g, r, mask, text)
            return r
        return arith


def _barrier(g: _Grid, mask: np.ndarray) -> None:
    """``__syncthreads()`` reached by the lanes of ``mask``: ``divergent_barrier`` unless a
    block's threads all reach it; their shared memory starts a new phase."""
    reached = mask.reshape(g.blocks, g.threads)
    count = reached.sum(axis=1)
    partial = np.nonzero((count > 0) & (count < g.threads))[0]
    if partial.size:
        blk = int(partial[0])
        lanes: np.ndarray = blk * g.threads + np.arange(g.threads)
        b, t_in = g.coords(int(lanes[np.argmax(reached[blk])]))
        _, t_out = g.coords(int(lanes[np.argmin(reached[blk])]))
        raise CudaExecutionError(
            "divergent_barrier",
            f"__syncthreads() reached by {int(count[blk])} of {g.threads} threads "
            f"of block {b}: thread {t_in} waits there, thread {t_out} never comes",
            block=b, thread=t_out, other_thread=t_in, statement="__syncthreads();")
    full = count == g.threads
    g.phase[full] += 1
    for m in g.memory.values():
        if m.buffer.scope is Scope.SHARED:
            m.new_phase(full)


def _lanes(v: Value, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(v), (n,))


def _check_int(g: _Grid, r: Value, mask: np.ndarray, what: str) -> None:
    if np.ndim(r) == 0:
        bad = not -g.int_max - 1 <= int(r) <= g.int_max  # type: ignore[arg-type]
        lane = int(np.argmax(mask)) if bad else 0
    else:
        arr = np.asarray(r)
        over = ((arr > g.int_max) | (arr < -g.int_max - 1)) & mask
        bad = bool(over.any())
        lane = int(np.argmax(over)) if bad else 0
    if bad:
        blk, thr = g.coords(lane)
        width = "int" if g.int_max < 2**31 else "long long"
        raise CudaExecutionError("int_overflow", f"{what} overflows {width} "
                                 f"(index arithmetic of the kernel)", block=blk, thread=thr)


def _who(g: _Grid, lane: int, warp: bool
         ) -> tuple[str, tuple[int, int, int], tuple[int, int, int], int | None]:
    """How errors name ``lane``'s thread, or its warp for a warp-collective statement:
    (text, blockIdx, threadIdx, warp)."""
    blk, thr = g.coords(lane)
    if not warp:
        return f"thread {thr} of block {blk}", blk, thr, None
    w = int(g.tid[lane]) // 32
    return f"warp {w} of block {blk}", blk, thr, w


def _access(g: _Grid, mem: _Memory, index: np.ndarray, lanes: np.ndarray, write: bool,
            text: str, warp: bool = False) -> np.ndarray:
    """Check one access of ``mem`` by ``lanes`` at ``index`` (bounds, cp.async data in
    flight, poison, races) and return the elements' positions in ``mem.data``. ``warp``:
    the access is a warp's collective one, ``lanes`` the warp's lane 0."""
    buf = mem.buffer
    index = index.astype(np.int64, copy=False)
    out = (index < 0) | (index >= buf.size)
    if out.any():
        k = int(np.argmax(out))
        who, blk, thr, w = _who(g, int(lanes[k]), warp)
        verb = "writes" if write else "reads"
        raise CudaExecutionError(
            "out_of_bounds", f"{who} {verb} {buf.name}[{int(index[k])}] "
            f"outside its {buf.size} elements", buffer=buf.name, index=int(index[k]),
            block=blk, thread=thr, statement=text, warp=w)
    if buf.scope is Scope.SHARED:
        keys, owner = g.local_block[lanes] * buf.size + index, g.tid[lanes]
    elif buf.scope is Scope.LOCAL:
        keys, owner = lanes * buf.size + index, lanes
    else:
        keys, owner = index, g.gtid[lanes]
    if g.warps is not None and buf.scope is Scope.SHARED:
        g.warps.check_landed(g, mem, keys, lanes, write, text, warp)
    if g.hopper is not None:
        g.hopper.check_plain(mem, keys, lanes, write, text)
    if not write and mem.written is not None:
        unset = ~mem.written[keys]
        if unset.any():
            k = int(np.argmax(unset))
            who, blk, thr, w = _who(g, int(lanes[k]), warp)
            place = {Scope.SHARED: "shared memory", Scope.LOCAL: "a register array"}.get(
                buf.scope, "global memory")
            raise CudaExecutionError(
                "uninitialized", f"{who} reads {buf.name}[{int(index[k])}] "
                f"({place}), which no thread wrote", buffer=buf.name, index=int(index[k]),
                block=blk, thread=thr, statement=text, warp=w)
    if mem.tracked:
        _track(g, mem, keys, owner, lanes, index, write, text, warp)
    return keys


def _track(g: _Grid, mem: _Memory, keys: np.ndarray, owner: np.ndarray, lanes: np.ndarray,
           index: np.ndarray, write: bool, text: str, warp: bool = False) -> None:
    """Record who touched ``keys`` in this phase; raise when two threads met on an element
    that one of them wrote."""
    lo, hi = (mem.wmin, mem.wmax) if write else (mem.rmin, mem.rmax)
    np.minimum.at(lo, keys, owner)
    np.maximum.at(hi, keys, owner)
    if write and g.order is not None:
        g.order.written(mem.buffer, keys)
    wlo, whi = mem.wmin[keys], mem.wmax[keys]
    first = np.minimum(wlo, mem.rmin[keys])
    last = np.maximum(whi, mem.rmax[keys])
    racy = (wlo <= whi) & (first != last)
    if not racy.any():
        return
    if not write and g.order is not None:  # published and acquired: ordered, no race
        racy &= ~g.order.ordered(g, mem, keys, owner, lanes)
        if not racy.any():
            return
    k = int(np.argmax(racy))
    lane = int(lanes[k])
    mine = int(owner[k])
    other = int(last[k]) if int(first[k]) == mine else int(first[k])
    me, blk, thr, w = _who(g, lane, warp)
    oblk, othr = g.thread_of(mem.buffer.scope, other, lane)
    who = f"thread {othr}" + (f" of block {oblk}" if oblk != blk else "")
    phase = ("in the same barrier phase" if mem.buffer.scope is Scope.SHARED
             else "in one launch (no barrier orders global memory across blocks)"
             if g.order is None else "in one launch, and no fence and atomic published "
             "the write to the reader's block")
    verb = "writes" if write else "reads"
    raise CudaExecutionError(
        "race", f"{me} {verb} {mem.buffer.name}[{int(index[k])}], "
        f"which {who} also touched, one of them writing, {phase}",
        buffer=mem.buffer.name, index=int(index[k]), block=blk, thread=thr,
        other_thread=othr, other_block=oblk, statement=text, warp=w)


def _trunc_div(x: Value, y: Value) -> Value:
    q = np.abs(x) // np.abs(y)
    return np.where((np.asarray(x) < 0) != (np.asarray(y) < 0), -q, q) if np.ndim(q) else \
        (-q if (x < 0) != (y < 0) else q)  # type: ignore[operator]


def _divide(op: str, c_style: bool) -> Callable[[Value, Value], Value]:
    """``//`` or ``%`` as the emitter prints it: C's (toward zero) or at_floordiv's."""
    if not c_style:
        return (lambda x, y: x // y) if op == "//" else (lambda x, y: x % y)  # type: ignore
    if op == "//":
        return _trunc_div
    return lambda x, y: x - y * _trunc_div(x, y)  # type: ignore[operator]


_CMP: dict[str, Callable[[Value, Value], Value]] = {
    "<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
    "==": np.equal, "!=": np.not_equal}
_INT_OPS: dict[str, Callable[[Value, Value], Value]] = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "min": np.minimum, "max": np.maximum}
# fminf/fmaxf return the other operand for a NaN, as np.fmin/np.fmax do
_FLOAT_OPS: dict[str, Callable[[Value, Value], Value]] = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "min": np.fmin,
    "max": np.fmax}
