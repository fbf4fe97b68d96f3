"""The execution model's statement compiler: a prepared kernel body becomes closures over
(grid, env, mask), built once and run for every chunk of blocks.

It compiles the control flow, stores, barriers and every expression itself (with the
emitter's index flattening, C division and index width: ``semantics``); every other
statement goes to the handler registered for its type (the warp-level, ordering and Hopper
parts: see ``simulate.HANDLERS``), which builds on the same closures.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from autotune.codegen.cuda.semantics import c_division, flat_index
from autotune.codegen.cuda.simulate_core import (
    Env,
    ExprFn,
    Grid,
    Memory,
    StmtFn,
    Value,
    barrier,
    broadcast,
    check_access,
    check_int,
)
from autotune.codegen.cuda.simulate_error import CudaExecutionError
from autotune.ir.analysis import Interval, loop_extents
from autotune.ir.expr import FLOAT, HALF_DTYPES, And, BinOp, Cmp, Const, Expr, Load, Select, Var
from autotune.ir.stmt import (
    Allocate,
    Buffer,
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
from autotune.ir.visitor import StmtFunctor
from autotune.ops.dtypes import round_to

if TYPE_CHECKING:
    from autotune.codegen.cuda.simulate_warp import FragmentType

_LAUNCH = {ForKind.BLOCK_X: ("block", 0), ForKind.BLOCK_Y: ("block", 1),
           ForKind.BLOCK_Z: ("block", 2), ForKind.THREAD_X: ("thread", 0),
           ForKind.THREAD_Y: ("thread", 1), ForKind.THREAD_Z: ("thread", 2)}


Handler = Callable[["ClosureBuilder", Stmt], StmtFn]


class ClosureBuilder(StmtFunctor[StmtFn]):
    """Turns statements and expressions into closures over (grid, env, mask), once;
    ``handlers`` build the closures of the statements it does not run itself (by type; a
    fragment's allocation under ``Allocate``)."""

    def __init__(self, func: PrimFunc, body: Stmt, handlers: Mapping[type, Handler]):
        self.func = func
        self.handlers = handlers
        self.ext = loop_extents(body)
        self.ranges: dict[Var, Interval] = {v: (0, n - 1) for v, n in self.ext.items()}
        self.context = ""  # the statement being compiled, named in errors
        self.fragments: dict[Buffer, FragmentType] = {}  # fragment buffers in scope

    def _text(self, s: Stmt) -> str:
        return format_stmt(s)[0].strip()

    @staticmethod
    def access(g: Grid, mem: Memory, index: np.ndarray, lanes: np.ndarray, write: bool,
               text: str) -> np.ndarray:
        """Check a plain access (`check_access`), for statements compiled elsewhere."""
        return check_access(g, mem, index, lanes, write, text)

    # ------------------------------------------------------------------ statements
    def _handled(self, s: Stmt) -> StmtFn:
        handler = self.handlers.get(type(s))
        if handler is None:
            raise TypeError(f"unknown statement {type(s).__name__}")
        return handler(self, s)

    def visit_leaf(self, s: Stmt) -> StmtFn:
        if isinstance(s, Store):
            return self._store(s)
        if isinstance(s, Sync):
            return self._sync(s)
        return self._handled(s)

    def visit_seq(self, s: Seq) -> StmtFn:
        parts = [self.visit(c) for c in s.stmts]

        def run(g: Grid, env: Env, mask: np.ndarray) -> None:
            for p in parts:
                p(g, env, mask)
        return run

    def visit_for(self, s: For) -> StmtFn:
        body, var, extent = self.visit(s.body), s.var, s.extent
        launch = _LAUNCH.get(s.kind)
        if launch is not None:  # printed as `const int v = threadIdx.x;` whatever the extent
            def bind(g: Grid, env: Env, mask: np.ndarray) -> None:
                env[var] = g.index[launch]
                body(g, env, mask)
            return bind

        def loop(g: Grid, env: Env, mask: np.ndarray) -> None:
            for i in range(extent):
                env[var] = i
                body(g, env, mask)
        return loop

    def visit_allocate(self, s: Allocate) -> StmtFn:
        if s.buffer.scope.is_fragment:
            return self._handled(s)
        body, buf = self.visit(s.body), s.buffer
        if buf.scope is Scope.SHARED:  # declared at function scope, one per block
            return body

        def alloc(g: Grid, env: Env, mask: np.ndarray) -> None:
            # a register array declared here holds poison, whatever an earlier trip left
            # (in the declaring threads: a coroutine's other warpgroups keep theirs)
            mem = g.memory.get(buf)
            if mem is None:
                g.memory[buf] = Memory.new(buf, np.zeros(g.lanes * buf.size, np.float32),
                                           defined=False, tracked=False)
            else:
                assert mem.written is not None
                mem.written.reshape(g.lanes, buf.size)[mask] = False
            if g.hopper is not None:
                g.hopper.allocated(buf, mask)
            body(g, env, mask)
        return alloc

    def visit_if(self, s: IfThenElse) -> StmtFn:
        self.context = self._text(IfThenElse(s.cond, Seq([])))
        cond = self.expr(s.cond)
        then = self.visit(s.then)
        els = None if s.else_ is None else self.visit(s.else_)

        def branch(g: Grid, env: Env, mask: np.ndarray) -> None:
            c: np.ndarray = broadcast(cond(g, env, mask), g.lanes).astype(bool)
            inside = mask & c
            if inside.any():
                then(g, env, inside)
            if els is not None:
                outside = mask & ~c
                if outside.any():
                    els(g, env, outside)
        return branch

    def _sync(self, s: Sync) -> StmtFn:
        def sync(g: Grid, env: Env, mask: np.ndarray) -> None:
            if g.hopper is not None:  # the scheduler passes it once every warpgroup is there
                g.hopper.sync(mask)
            else:
                barrier(g, mask)
        return sync

    def _store(self, s: Store) -> StmtFn:
        text = self.context = self._text(s)
        write = self.stmt_store(s.buffer, s.indices, text)
        value = self.expr(s.value)

        def store(g: Grid, env: Env, mask: np.ndarray) -> None:
            write(g, env, mask, value(g, env, mask))
        return store

    def stmt_store(self, buf: Buffer, indices: tuple[Expr, ...], text: str
                   ) -> Callable[[Grid, Env, np.ndarray, Value], None]:
        """What a store to ``buf[indices]`` of a value (per lane) does."""
        index = self.expr(flat_index(buf, indices, self.ext))
        half = buf.dtype if buf.dtype in HALF_DTYPES else None

        def store(g: Grid, env: Env, mask: np.ndarray, value: Value) -> None:
            v = broadcast(value, g.lanes)
            lanes: np.ndarray = np.nonzero(mask)[0]
            mem = g.memory[buf]
            keys = check_access(g, mem, broadcast(index(g, env, mask), g.lanes)[lanes], lanes,
                           True, text)
            mem.data[keys] = v[lanes] if half is None else round_to(v[lanes], half)
            if mem.written is not None:
                mem.written[keys] = True
        return store

    # ------------------------------------------------------------------ expressions
    def expr(self, e: Expr) -> ExprFn:
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

            def both(g: Grid, env: Env, mask: np.ndarray) -> Value:
                left: np.ndarray = broadcast(a(g, env, mask), g.lanes).astype(bool)
                sub = mask & left
                if not sub.any():
                    return left & False
                return left & broadcast(b(g, env, sub), g.lanes).astype(bool)
            return both
        if isinstance(e, Cmp):
            return self._cmp(e)
        if isinstance(e, BinOp):
            return self._binop(e)
        raise TypeError(f"unknown expression {type(e).__name__}")

    def _load(self, e: Load) -> ExprFn:
        buf = e.buffer
        index = self.expr(flat_index(buf, e.indices, self.ext))
        text = self.context

        def load(g: Grid, env: Env, mask: np.ndarray) -> Value:
            lanes = np.nonzero(mask)[0]
            out: np.ndarray = np.zeros(g.lanes, np.float32)
            if lanes.size:
                mem = g.memory[buf]
                keys = check_access(g, mem, broadcast(index(g, env, mask), g.lanes)[lanes], lanes,
                               False, text)
                out[lanes] = mem.data[keys]
            return out
        return load

    def _select(self, e: Select) -> ExprFn:
        cond, t, f = self.expr(e.cond), self.expr(e.t), self.expr(e.f)

        def select(g: Grid, env: Env, mask: np.ndarray) -> Value:
            c: np.ndarray = broadcast(cond(g, env, mask), g.lanes).astype(bool)
            yes, no = mask & c, mask & ~c
            tv = t(g, env, yes) if yes.any() else 0
            fv = f(g, env, no) if no.any() else 0
            return np.where(c, tv, fv)
        return select

    def _cmp(self, e: Cmp) -> ExprFn:
        a, b, op = self.expr(e.a), self.expr(e.b), _CMP[e.op]
        return lambda g, env, mask: op(a(g, env, mask), b(g, env, mask))

    def _binop(self, e: BinOp) -> ExprFn:
        a, b = self.expr(e.a), self.expr(e.b)
        if e.dtype == FLOAT:
            op = _FLOAT_OPS[e.op]
            return lambda g, env, mask: op(a(g, env, mask), b(g, env, mask))
        if e.op in ("//", "%"):
            div = _divide(e.op, c_division(e, self.ranges))
        else:
            div = _INT_OPS[e.op]
        text = f"integer {e.op}"

        def arith(g: Grid, env: Env, mask: np.ndarray) -> Value:
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
            check_int(g, r, mask, text)
            return r
        return arith

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
