"""Scalar lowering of loop-IR statements and expressions into one LLVM function's text.

Vectorized and parallel loops are delegated to ``vector`` and ``parallel``; both
reuse this emitter's scalar expression and loop helpers.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from autotune.codegen.llvm.index import flat_index, in_bounds, known_multiple
from autotune.codegen.llvm.text import (
    F32,
    FAST,
    I1,
    I64,
    PTR,
    FunctionBuilder,
    ModuleBuilder,
    Val,
    const_bool,
    const_float,
    const_int,
    vec_ty,
)
from autotune.ir.analysis import Interval, decide, interval
from autotune.ir.expr import BOOL, FLOAT, And, BinOp, Cmp, Const, Expr, Load, Select, Var
from autotune.ir.stmt import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    Scope,
    Stmt,
    Store,
    Sync,
)
from autotune.ir.visitor import StmtVisitor

UNROLL_LIMIT = 512  # longer "unrolled" loops stay loops: code size would swamp compile time

_ICMP = {"<": "slt", "<=": "sle", ">": "sgt", ">=": "sge", "==": "eq", "!=": "ne"}
_FCMP = {"<": "olt", "<=": "ole", ">": "ogt", ">=": "oge", "==": "oeq", "!=": "une"}


@dataclass
class Env:
    """What names mean at the current point: loop vars, their bounds, buffer pointers."""

    vars: dict[Var, Val] = field(default_factory=dict)
    ranges: dict[Var, Interval] = field(default_factory=dict)
    bufs: dict[Buffer, Val] = field(default_factory=dict)
    in_parallel: bool = False


def _fold_int(op: str, a: Val, b: Val) -> Val | None:
    """Fold integer literals (unrolled and lane-bound variables make many of them)."""
    lit_a = a.ref.lstrip("-").isdigit() and a.ty == I64
    lit_b = b.ref.lstrip("-").isdigit() and b.ty == I64
    if lit_a and lit_b:
        x, y = int(a.ref), int(b.ref)
        if op in ("+", "-", "*", "min", "max"):
            return const_int({"+": x + y, "-": x - y, "*": x * y, "min": min(x, y),
                              "max": max(x, y)}[op])
        if y != 0:
            return const_int(x // y if op == "//" else x % y)  # Python's are floor ops too
    if lit_b and ((op in ("+", "-") and b.ref == "0") or (op in ("*", "//") and b.ref == "1")):
        return a
    if lit_a and ((op == "+" and a.ref == "0") or (op == "*" and a.ref == "1")):
        return b
    if (lit_a and op == "*" and a.ref == "0") or (lit_b and op == "*" and b.ref == "0"):
        return const_int(0)
    return None


def access_align(flat: Expr, ranges: dict[Var, Interval], zero: Var | None = None) -> int:
    """Byte alignment of ``&buf[flat]`` (``zero`` taken as 0) given 64-byte aligned bases."""
    m, align = known_multiple(flat, ranges, zero) * 4, 4
    while align < 64 and m % (align * 2) == 0:
        align *= 2
    return align


# Emits a loop of a special kind (vectorized, parallel) and says whether it could; a loop it
# declines becomes a serial loop. The compiler hands these in: they build on this module.
LoopEmitter = Callable[["FunctionEmitter", For], bool]


class FunctionEmitter(StmtVisitor):
    """Emits statements into one LLVM function; ``spawn`` starts another (outlined) one.
    ``loops`` emit the loop kinds that are more than a serial loop."""

    def __init__(self, module: ModuleBuilder, fb: FunctionBuilder, env: Env, target: Any,
                 loops: Mapping[ForKind, LoopEmitter]):
        self.module, self.fb, self.env, self.target = module, fb, env, target
        self.loops = loops

    def spawn(self, fb: FunctionBuilder, env: Env) -> "FunctionEmitter":
        return FunctionEmitter(self.module, fb, env, self.target, self.loops)

    @contextmanager
    def bind(self, var: Var, val: Val | None, rng: Interval) -> Iterator[None]:
        """Give ``var`` a value (None: vector lanes, value-less) and bounds for a scope."""
        old = self.env.vars.get(var), self.env.ranges.get(var)
        if val is not None:
            self.env.vars[var] = val
        self.env.ranges[var] = rng
        try:
            yield
        finally:
            self.env.vars.pop(var, None)
            self.env.ranges.pop(var, None)
            if old[0] is not None:
                self.env.vars[var] = old[0]
            if old[1] is not None:
                self.env.ranges[var] = old[1]

    # -- instruction helpers (scalars or vectors alike) --------------------------------
    def fbin(self, op: str, a: Val, b: Val) -> Val:
        if op in ("+", "-", "*", "/"):
            name = {"+": "fadd", "-": "fsub", "*": "fmul", "/": "fdiv"}[op]
            return self.fb.emit(a.ty, f"{name} {FAST} {a}, {b.ref}")
        if op in ("min", "max"):
            c = self.cmp("<" if op == "min" else ">", a, b, True)
            return self.select(c, a, b)
        raise ValueError(f"float operator {op!r} is not supported on llvm target")

    def ibin(self, op: str, a: Val, b: Val, ra: Interval | None, rb: Interval | None) -> Val:
        fb = self.fb
        folded = _fold_int(op, a, b)
        if folded is not None:
            return folded
        if op in ("+", "-", "*"):
            name = {"+": "add", "-": "sub", "*": "mul"}[op]
            return fb.emit(a.ty, f"{name} nsw {a}, {b.ref}")
        if op in ("min", "max"):
            return self.select(self.cmp("<" if op == "min" else ">", a, b, False), a, b)
        if ra is not None and rb is not None and ra[0] >= 0 and rb[0] > 0:
            # both non-negative: floor and truncation agree and unsigned ops are cheapest
            return fb.emit(a.ty, f"{'udiv' if op == '//' else 'urem'} {a}, {b.ref}")
        q = fb.emit(a.ty, f"sdiv {a}, {b.ref}")
        r = fb.emit(a.ty, f"srem {a}, {b.ref}")
        # floor semantics: fix up when the remainder is non-zero and signs differ
        nz = fb.emit(I1, f"icmp ne {r}, 0")
        sx = fb.emit(a.ty, f"xor {r}, {b.ref}")
        neg = fb.emit(I1, f"icmp slt {sx}, 0")
        fix = fb.emit(I1, f"and {nz}, {neg.ref}")
        if op == "//":
            one = fb.emit(a.ty, f"zext {fix} to {a.ty}")
            return fb.emit(a.ty, f"sub {q}, {one.ref}")
        return fb.emit(a.ty, f"add {r}, {self.select(fix, b, const_int(0, a.ty)).ref}")

    def cmp(self, op: str, a: Val, b: Val, is_float: bool) -> Val:
        ty = vec_ty(I1, a.lanes) if a.lanes else I1
        if is_float:
            return self.fb.emit(ty, f"fcmp {_FCMP[op]} {a}, {b.ref}")
        return self.fb.emit(ty, f"icmp {_ICMP[op]} {a}, {b.ref}")

    def select(self, c: Val, t: Val, f: Val) -> Val:
        return self.fb.emit(t.ty, f"select {c}, {t}, {f}")

    def splat(self, x: Val, lanes: int) -> Val:
        vt = vec_ty(x.ty, lanes)
        ins = self.fb.emit(vt, f"insertelement {vt} poison, {x}, i64 0")
        return self.fb.emit(vt, f"shufflevector {ins}, {vt} poison, "
                                f"<{lanes} x i32> zeroinitializer")

    def gep(self, base: Val, idx: Val, inbounds: bool = True) -> Val:
        kw = "getelementptr inbounds" if inbounds else "getelementptr"
        return self.fb.emit(PTR, f"{kw} float, {base}, {idx}", "p")

    def buffer_ptr(self, buf: Buffer) -> Val:
        if buf not in self.env.bufs:
            raise ValueError(f"buffer {buf.name!r} is neither an argument, a workspace, "
                             f"nor allocated in an enclosing scope")
        return self.env.bufs[buf]

    # -- scalar expressions --------------------------------------------------------
    def expr(self, e: Expr, guard: bool = False) -> Val:
        """Scalar value of ``e``; ``guard``: loads may be out of bounds (their value unused),
        so clamp their offsets into the buffer."""
        if isinstance(e, Const):
            if e.dtype == FLOAT:
                return const_float(e.value)
            return const_bool(bool(e.value)) if e.dtype == BOOL else const_int(int(e.value))
        if isinstance(e, Var):
            if e not in self.env.vars:
                raise ValueError(f"variable {e.name!r} is used outside the loop defining it")
            return self.env.vars[e]
        if isinstance(e, BinOp):
            a, b = self.expr(e.a, guard), self.expr(e.b, guard)
            if e.dtype == FLOAT:
                return self.fbin(e.op, a, b)
            ranges = self.env.ranges
            return self.ibin(e.op, a, b, interval(e.a, ranges), interval(e.b, ranges))
        if isinstance(e, (Cmp, And)) and decide(e, self.env.ranges) is not None:
            return const_bool(bool(decide(e, self.env.ranges)))
        if isinstance(e, Cmp):
            a, b = self.expr(e.a, guard), self.expr(e.b, guard)
            return self.cmp(e.op, a, b, e.a.dtype == FLOAT)
        if isinstance(e, And):
            a, b = self.expr(e.a, guard), self.expr(e.b, guard)
            return self.fb.emit(I1, f"and {a}, {b.ref}")
        if isinstance(e, Select):
            truth = decide(e.cond, self.env.ranges)
            if truth is not None:  # the other arm may not even be safe to evaluate
                return self.expr(e.t if truth else e.f, guard)
            c = self.expr(e.cond, guard)
            return self.select(c, self.expr(e.t, True), self.expr(e.f, True))
        if isinstance(e, Load):
            return self.load(e, guard)
        raise TypeError(f"unknown expression {type(e).__name__}")

    def offset(self, buf: Buffer, indices: tuple[Expr, ...], guard: bool) -> tuple[Val, int]:
        """Element offset (clamped into the buffer under ``guard`` unless provably inside)
        and the byte alignment of the address it gives."""
        flat = flat_index(buf, indices)
        idx = self.expr(flat)
        if guard and not in_bounds(buf, flat, self.env.ranges):
            lo = self.select(self.cmp("<", idx, const_int(0), False), const_int(0), idx)
            hi = const_int(buf.size - 1)
            return self.select(self.cmp(">", lo, hi, False), hi, lo), 4
        return idx, access_align(flat, self.env.ranges)

    def load(self, e: Load, guard: bool) -> Val:
        idx, align = self.offset(e.buffer, e.indices, guard)
        p = self.gep(self.buffer_ptr(e.buffer), idx)
        return self.fb.emit(F32, f"load float, {p}, align {align}", "ld")

    # -- statements ----------------------------------------------------------------
    def visit_leaf(self, s: Stmt) -> None:
        if isinstance(s, Store):
            val = self.expr(s.value)
            idx, align = self.offset(s.buffer, s.indices, False)
            p = self.gep(self.buffer_ptr(s.buffer), idx)
            self.fb.do(f"store {val}, {p}, align {align}")
        elif not isinstance(s, Sync):  # a barrier is a no-op: one CPU thread runs a block
            raise TypeError(f"unknown statement {type(s).__name__}")

    def visit_if(self, s: IfThenElse) -> None:
        truth = decide(s.cond, self.env.ranges)
        if truth is not None:
            branch = s.then if truth else s.else_
            if branch is not None:
                self.visit(branch)
            return
        then, else_ = s.then, s.else_
        self.if_then_else(self.expr(s.cond), lambda: self.visit(then),
                          None if else_ is None else (lambda: self.visit(else_)))

    def visit_allocate(self, s: Allocate) -> None:
        buf = s.buffer
        if buf.scope is Scope.GLOBAL:
            if buf not in self.env.bufs:
                raise ValueError(f"global buffer {buf.name!r} must be a PrimFunc workspace")
            self.visit(s.body)
            return
        self.env.bufs[buf] = self.fb.alloca(f"[{max(buf.size, 1)} x float]", 64, buf.name)
        try:
            self.visit(s.body)
        finally:
            del self.env.bufs[buf]

    def if_then_else(self, cond: Val, then: Callable[[], None],
                     other: Callable[[], None] | None) -> None:
        fb = self.fb
        then_b = fb.new_block("then")
        else_b = fb.new_block("else") if other is not None else None
        join = fb.new_block("endif")
        fb.cond_br(cond, then_b, else_b or join)
        fb.set_block(then_b)
        then()
        fb.br(join)
        if else_b is not None and other is not None:
            fb.set_block(else_b)
            other()
            fb.br(join)
        fb.set_block(join)

    def visit_for(self, s: For) -> None:
        if s.kind.is_thread_binding:
            raise ValueError(f"loop {s.var.name!r} of kind {s.kind.value} is not supported "
                             f"on llvm target")
        if s.extent <= 0:
            return
        if s.kind is ForKind.UNROLLED and s.extent <= UNROLL_LIMIT:
            for i in range(s.extent):
                with self.bind(s.var, const_int(i), (i, i)):
                    self.visit(s.body)
            return
        special = self.loops.get(s.kind)
        nested = s.kind is ForKind.PARALLEL and self.env.in_parallel  # one level of threads
        if special is not None and not nested and special(self, s):
            return
        self.serial_loop(s.var, const_int(0), const_int(s.extent), (0, s.extent - 1),
                         lambda: self.visit(s.body), nonempty=True)

    def serial_loop(self, var: Var, start: Val, end: Val, rng: Interval,
                    body: Callable[[], None], nonempty: bool) -> None:
        """``for var in [start, end)``: a bottom-tested loop with a phi induction variable."""
        fb = self.fb
        pre = fb.cur
        head = fb.new_block(f"for.{var.name}")
        latch = fb.new_block(f"next.{var.name}")
        exit_ = fb.new_block(f"done.{var.name}")
        if nonempty:
            fb.br(head)
        else:
            fb.cond_br(fb.emit(I1, f"icmp slt {start}, {end.ref}"), head, exit_)
        iv = "%" + fb.fresh(var.name)
        nxt = "%" + fb.fresh(var.name + ".next")
        fb.set_block(head)
        fb.do(f"{iv} = phi i64 [{start.ref}, %{pre.label}], [{nxt}, %{latch.label}]")
        with self.bind(var, Val(I64, iv), rng):
            body()
        fb.br(latch)
        fb.set_block(latch)
        fb.do(f"{nxt} = add nuw nsw i64 {iv}, 1")
        fb.cond_br(fb.emit(I1, f"icmp eq i64 {nxt}, {end.ref}"), exit_, head)
        fb.set_block(exit_)
