"""Explicit SIMD lowering of a ``VECTORIZED`` loop: the whole loop becomes straight-line
``<W x T>`` code, or the caller falls back to a serial loop when that would be unsafe.

Per expression: no dependence on the lane var -> scalar (splat on use); affine with
coefficient 1 -> contiguous vector load/store; a load with a small constant stride k -> one
contiguous load of k times the lanes and a shuffle picking every k-th; anything else ->
per-lane gather/scatter. Guards that depend on the lane become masks (masked stores;
masked or clamped loads).
"""
from __future__ import annotations

from functools import partial

from autotune.codegen.llvm.emit import FunctionEmitter, access_align
from autotune.codegen.llvm.index import (
    affine_coeff,
    depends_on,
    flat_index,
    in_bounds,
    same_element,
)
from autotune.codegen.llvm.text import F32, I1, I64, Val, const_bool, const_int, const_vec, vec_ty
from autotune.ir.analysis import decide, stmt_exprs
from autotune.ir.expr import FLOAT, And, BinOp, Cmp, Expr, Load, Select, Var, add, walk
from autotune.ir.stmt import For, IfThenElse, Seq, Stmt, Store, Sync, walk_stmts
from autotune.ir.visitor import StmtVisitor

MAX_LANES = 64  # wider loops are left to LLVM's own loop vectorizer
# Strided loads up to this stride read the span contiguously and shuffle: a stride-2 max-pool
# row of 16 lanes as two vector loads and a permute instead of 16 scalar loads and inserts.
MAX_SHUFFLE_STRIDE = 4


def vectorizable(loop: For) -> bool:
    """Whether lane-parallel execution of ``loop`` provably matches its serial semantics."""
    v, w = loop.var, loop.extent
    if not 2 <= w <= MAX_LANES:
        return False
    stmts = list(walk_stmts(loop.body))
    if not all(isinstance(s, (Seq, Store, IfThenElse, Sync)) for s in stmts):
        return False  # nested loops and allocations stay scalar
    stores = [s for s in stmts if isinstance(s, Store)]
    loads = [x for e in stmt_exprs(loop.body) for x in walk(e) if isinstance(x, Load)]
    for st in stores:
        coeff = affine_coeff(flat_index(st.buffer, st.indices), v)
        if coeff == 0:
            return False  # every lane writes one element: a reduction across lanes
        # Lanes run each statement together, so any lane reading or writing an element of
        # a stored buffer that another lane writes would change the result.
        accesses: list[Store | Load] = [*stores, *loads]
        others = [a for a in accesses if a.buffer is st.buffer and a is not st]
        if others and (coeff is None or not all(same_element(st.buffer, a.indices, st.indices)
                                                for a in others)):
            return False
    return True


def emit_vectorized(em: FunctionEmitter, loop: For) -> bool:
    """Emit ``loop`` as vector code; False (nothing emitted) when it must stay scalar."""
    if not vectorizable(loop):
        return False
    with em.bind(loop.var, None, (0, loop.extent - 1)):  # bounds only: lanes have no scalar
        _Lanes(em, loop.var, loop.extent).visit(loop.body)
    return True


class _Lanes(StmtVisitor):
    """Vector emission state for one loop: the lane var, the lane count and the mask of
    the lanes that run the statement visited (None: all)."""

    def __init__(self, em: FunctionEmitter, var: Var, lanes: int):
        self.em, self.v, self.w = em, var, lanes
        self.mask: Val | None = None
        self.iota = const_vec(I64, list(range(lanes)))

    def vec(self, x: Val) -> Val:
        return x if x.lanes else self.em.splat(x, self.w)

    def at_lane(self, e: Expr, lane: int, guard: bool = False) -> Val:
        with self.em.bind(self.v, const_int(lane), (lane, lane)):
            return self.em.expr(e, guard)

    def from_lanes(self, e: Expr, elem: str, guard: bool = False) -> Val:
        """Build a vector by evaluating ``e`` once per lane (gathers, non-affine indices)."""
        fb, vt = self.em.fb, vec_ty(elem, self.w)
        acc = Val(vt, "poison")
        for lane in range(self.w):
            x = self.at_lane(e, lane, guard)
            acc = fb.emit(vt, f"insertelement {acc}, {x}, i64 {lane}")
        return acc

    def mask_and(self, a: Val | None, b: Val) -> Val:
        return b if a is None else self.em.fb.emit(a.ty, f"and {a}, {b.ref}")

    # -- statements (Seq, Store, IfThenElse and Sync: see `vectorizable`) -------------
    def visit_leaf(self, s: Stmt) -> None:
        if isinstance(s, Store):
            self.store(s, self.mask)

    def visit_if(self, s: IfThenElse) -> None:
        em, mask = self.em, self.mask
        truth = decide(s.cond, em.env.ranges)
        if truth is not None:
            branch = s.then if truth else s.else_
            if branch is not None:
                self.visit(branch)
        elif not depends_on(s.cond, self.v):
            cond = em.expr(s.cond, guard=mask is not None)
            then, else_ = s.then, s.else_
            em.if_then_else(cond, lambda: self.visit(then),
                            None if else_ is None else (lambda: self.visit(else_)))
        else:
            m = self.vec(self.expr(s.cond, False, mask))
            self.masked(s.then, self.mask_and(mask, m))
            if s.else_ is not None:
                inv = em.fb.emit(m.ty, f"xor {m}, {const_vec(I1, [1] * self.w).ref}")
                self.masked(s.else_, self.mask_and(mask, inv))

    def masked(self, s: Stmt, mask: Val | None) -> None:
        """Visit ``s`` with its lanes limited to ``mask``."""
        outer, self.mask = self.mask, mask
        self.visit(s)
        self.mask = outer

    def store(self, s: Store, mask: Val | None) -> None:
        em, fb = self.em, self.em.fb
        flat = flat_index(s.buffer, s.indices)
        val = self.expr(s.value, False, mask)
        base_ptr = em.buffer_ptr(s.buffer)
        if affine_coeff(flat, self.v) == 1:
            p = em.gep(base_ptr, self.at_lane(flat, 0), inbounds=mask is None)
            val, align = self.vec(val), access_align(flat, em.env.ranges, self.v)
            if mask is None:
                fb.do(f"store {val}, {p}, align {align}")
            else:
                fn = self.intrinsic("store", val.ty)
                fb.do(f"call void {fn}({val}, {p}, i32 {align}, {mask})")
            return
        for lane in range(self.w):  # scatter, lane by lane, in serial order
            x = fb.emit(F32, f"extractelement {val}, i64 {lane}") if val.lanes else val
            if mask is None:
                self.store_lane(s, flat, lane, x)
                continue
            bit = fb.emit(I1, f"extractelement {mask}, i64 {lane}")
            em.if_then_else(bit, partial(self.store_lane, s, flat, lane, x), None)

    def store_lane(self, s: Store, flat: Expr, lane: int, x: Val) -> None:
        p = self.em.gep(self.em.buffer_ptr(s.buffer), self.at_lane(flat, lane))
        self.em.fb.do(f"store {x}, {p}, align 4")

    def intrinsic(self, kind: str, vt: str, lanes: int = 0) -> str:
        lanes = lanes or self.w
        name = f"llvm.masked.{kind}.v{lanes}f32.p0"
        mt = vec_ty(I1, lanes)
        # the i32 alignment operand is the long-standing form; LLVM >= 21 auto-upgrades it
        text = (f"declare {vt} @{name}(ptr, i32, {mt}, {vt})" if kind == "load"
                else f"declare void @{name}({vt}, ptr, i32, {mt})")
        return self.em.module.declare(name, text)

    # -- expressions ---------------------------------------------------------------
    def expr(self, e: Expr, guard: bool, mask: Val | None) -> Val:
        """Value of ``e`` across lanes: a scalar when it does not depend on the lane var."""
        em = self.em
        if not depends_on(e, self.v):
            return em.expr(e, guard or mask is not None)
        if e is self.v:
            return self.iota
        if isinstance(e, Load):
            return self.load(e, guard, mask)
        if e.dtype not in (FLOAT, "bool"):  # integer index arithmetic
            coeff = affine_coeff(e, self.v)
            if coeff is None:
                return self.from_lanes(e, I64, guard)
            base = self.vec(self.at_lane(e, 0, guard))
            step = const_vec(I64, [coeff * i for i in range(self.w)])
            return em.fb.emit(base.ty, f"add nsw {base}, {step.ref}")
        if isinstance(e, BinOp):
            a, b = self.vec(self.expr(e.a, guard, mask)), self.vec(self.expr(e.b, guard, mask))
            return em.fbin(e.op, a, b)
        if isinstance(e, (Cmp, And)) and decide(e, em.env.ranges) is not None:
            return const_bool(bool(decide(e, em.env.ranges)))
        if isinstance(e, Cmp):
            a, b = self.vec(self.expr(e.a, guard, mask)), self.vec(self.expr(e.b, guard, mask))
            return em.cmp(e.op, a, b, e.a.dtype == FLOAT)
        if isinstance(e, And):
            a, b = self.vec(self.expr(e.a, guard, mask)), self.vec(self.expr(e.b, guard, mask))
            return em.fb.emit(a.ty, f"and {a}, {b.ref}")
        if isinstance(e, Select):
            truth = decide(e.cond, em.env.ranges)
            if truth is not None:
                return self.expr(e.t if truth else e.f, guard, mask)
            c = self.expr(e.cond, guard, mask)
            t, f = self.vec(self.expr(e.t, True, mask)), self.vec(self.expr(e.f, True, mask))
            return em.select(c, t, f)
        raise TypeError(f"unknown expression {type(e).__name__}")

    def load(self, e: Load, guard: bool, mask: Val | None) -> Val:
        em, fb = self.em, self.em.fb
        flat = flat_index(e.buffer, e.indices)
        coeff = affine_coeff(flat, self.v)
        unsafe = (guard or mask is not None) and not in_bounds(e.buffer, flat, em.env.ranges)
        if coeff == 0:  # depends on the lane only in ways that cancel out
            return self.at_lane(e, 0, unsafe)
        if coeff is not None and 2 <= coeff <= MAX_SHUFFLE_STRIDE:
            return self.strided_load(e, flat, coeff, unsafe)
        if coeff != 1:
            return self.from_lanes(e, F32, unsafe)
        base = self.at_lane(flat, 0)
        p = em.gep(em.buffer_ptr(e.buffer), base, inbounds=not unsafe)
        vt, align = vec_ty(F32, self.w), access_align(flat, em.env.ranges, self.v)
        if not unsafe:
            return fb.emit(vt, f"load {vt}, {p}, align {align}", "vld")
        if mask is None or guard:
            # inside a select arm: load only the lanes whose offsets lie in the buffer
            offs = fb.emit(vec_ty(I64, self.w), f"add nsw {em.splat(base, self.w)}, "
                                                 f"{self.iota.ref}")
            size = const_vec(I64, [e.buffer.size] * self.w)
            mask = fb.emit(vec_ty(I1, self.w), f"icmp ult {offs}, {size.ref}")
        fn = self.intrinsic("load", vt)
        return fb.emit(vt, f"call {vt} {fn}({p}, i32 {align}, {mask}, {vt} zeroinitializer)",
                       "vld")

    def strided_load(self, e: Load, flat: Expr, stride: int, unsafe: bool) -> Val:
        """Lane i reads ``flat`` + stride * i: load ``stride`` x lanes elements from lane 0's
        and keep every ``stride``-th. The last stride - 1 elements are past the last lane's:
        a plain load where they provably lie in the buffer, else a masked one (lanes past
        the span off; when the lanes' own reads may fall outside, those past the buffer)."""
        em, fb = self.em, self.em.fb
        wide = stride * self.w
        vt = vec_ty(F32, wide)
        base = self.at_lane(flat, 0)
        p = em.gep(em.buffer_ptr(e.buffer), base, inbounds=not unsafe)
        align = access_align(flat, em.env.ranges, self.v)
        if not unsafe and in_bounds(e.buffer, add(flat, stride - 1), em.env.ranges):
            row = fb.emit(vt, f"load {vt}, {p}, align {align}", "vld")
        else:
            if unsafe:
                offs = fb.emit(vec_ty(I64, wide), f"add nsw {em.splat(base, wide)}, "
                                                   f"{const_vec(I64, list(range(wide))).ref}")
                size = const_vec(I64, [e.buffer.size] * wide)
                mask = fb.emit(vec_ty(I1, wide), f"icmp ult {offs}, {size.ref}")
            else:
                span = stride * (self.w - 1) + 1
                mask = const_vec(I1, [int(i < span) for i in range(wide)])
            fn = self.intrinsic("load", vt, wide)
            row = fb.emit(vt, f"call {vt} {fn}({p}, i32 {align}, {mask}, "
                              f"{vt} zeroinitializer)", "vld")
        picks = ", ".join(f"i32 {stride * i}" for i in range(self.w))
        return fb.emit(vec_ty(F32, self.w),
                       f"shufflevector {row}, {vt} poison, <{self.w} x i32> <{picks}>")
