"""Affine analysis, substitution and range-aware simplification of index expressions."""
from __future__ import annotations

from typing import Callable, Container, Iterator, Mapping

from autotune.ir.expr import (
    FLOAT,
    INT,
    And,
    BinOp,
    Cmp,
    Const,
    Expr,
    Load,
    Select,
    Var,
    add,
    binop,
    cmp,
    mul,
    walk,
)
from autotune.ir.stmt import (
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    AtomicAdd,
    Buffer,
    Fence,
    For,
    IfThenElse,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    MmaFill,
    MmaLoad,
    MmaStore,
    MmaSync,
    NamedSync,
    SetMaxNReg,
    SmemMatrix,
    Stmt,
    Store,
    Sync,
    TmaLoad,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
    walk_stmts,
)
from autotune.ir.visitor import StmtMutator

Affine = tuple[dict[Expr, int], int]
_ZERO = Const(0)  # (immutable, shared)
Interval = tuple[int, int]  # closed: (lowest, highest)


def affine(e: Expr, inner: Container[Var] | None = None) -> Affine | None:
    """``e`` as ``(coefficients, constant)`` when it is an integer affine form of vars, else None.

    With ``inner``, a non-affine sub-expression free of ``inner`` vars (say ``f // 4`` of an
    outer fused loop) is kept as an opaque term, so only the inner vars must appear linearly.
    """
    return _affine(e, inner)


def _affine(e: Expr, inner: Container[Var] | None) -> Affine | None:
    coefs: dict[Expr, int] = {}
    c = _accumulate(e, 1, coefs, inner)
    if c is None:
        return None
    return {v: k for v, k in coefs.items() if k}, c


def _accumulate(e: Expr, scale: int, coefs: dict[Expr, int], inner: Container[Var] | None
                ) -> int | None:
    """Add ``scale * e``'s terms into ``coefs`` (one dict for the whole expression, not one
    per node) and return its constant times ``scale``; None when ``e`` is not affine."""
    if isinstance(e, Var):
        coefs[e] = coefs.get(e, 0) + scale
        return 0
    if isinstance(e, Const):
        return int(e.value) * scale if e.dtype == INT else None
    if isinstance(e, BinOp):
        op = e.op
        if op == "+" or op == "-":
            a = _accumulate(e.a, scale, coefs, inner)
            if a is None:
                return None  # e holds what made e.a fail (an inner var), so e fails too
            b = _accumulate(e.b, scale if op == "+" else -scale, coefs, inner)
            return None if b is None else a + b
        if op == "*":
            x, y = e.a, e.b
            if isinstance(y, Const) and y.dtype == INT:
                return _accumulate(x, scale * int(y.value), coefs, inner)
            if isinstance(x, Const) and x.dtype == INT:
                return _accumulate(y, scale * int(x.value), coefs, inner)
            fa, fb = _affine(x, inner), _affine(y, inner)
            if fa is not None and fb is not None and (not fa[0] or not fb[0]):
                if not fa[0]:
                    fa, fb = fb, fa
                k = fb[1] * scale
                for v, cv in fa[0].items():
                    coefs[v] = coefs.get(v, 0) + cv * k
                return fa[1] * k
    if inner is not None and e.dtype == INT and _free_of(e, inner):
        coefs[e] = coefs.get(e, 0) + scale  # an opaque term
        return 0
    return None


def _free_of(e: Expr, inner: Container[Var]) -> bool:
    """No var of ``inner`` occurs in ``e``."""
    if isinstance(inner, tuple) and not inner:  # ``affine(e, ())``: nothing to look for
        return True
    return not any(isinstance(x, Var) and x in inner for x in walk(e))


def from_affine(coefs: Mapping[Expr, int], c: int) -> Expr:
    """Rebuild a canonical expression (largest coefficients first) from an affine form."""
    terms = list(coefs.items())
    if len(terms) > 1:
        if len({abs(k) for _, k in terms}) == len(terms):  # no ties: skip the costly reprs
            terms.sort(key=lambda t: -abs(t[1]))
        else:
            terms.sort(key=lambda t: (-abs(t[1]), repr(t[0])))
    out: Expr = _ZERO
    for v, k in terms:  # (unit coefficients skip mul: it would build a Const to fold away)
        if k == -1:
            out = binop("-", out, v)
        else:
            out = add(out, v if k == 1 else mul(v, k))
    if c == 0:
        return out
    return add(out, c) if c > 0 else binop("-", out, -c)


def affine_range(coefs: Mapping[Expr, int], c: int, extents: Mapping[Var, int]
                 ) -> tuple[int, int] | None:
    """Min and max of an affine form over vars in ``[0, extent)`` (opaque terms bounded by
    interval arithmetic); None if a term is unbounded."""
    lo = hi = c
    for v, k in coefs.items():
        r = expr_range(v, extents)
        if r is None:
            return None
        a, b = k * r[0], k * r[1]
        lo += min(a, b)
        hi += max(a, b)
    return lo, hi


def simplify(e: Expr, extents: Mapping[Var, int], memo: dict[Expr, Expr] | None = None
             ) -> Expr:
    """Canonicalise affine sub-expressions and remove ``//`` and ``%`` that the ranges decide.

    ``memo`` caches results across calls that share ``extents`` (one lowering simplifies the
    same index expressions for its guards, its cached tiles and its final pass).
    """
    if isinstance(e, (Var, Const)):
        return e
    if memo is None:
        memo = {}
    r = memo.get(e)
    if r is None:
        r = memo[e] = _simplify(e, extents, memo)
    return r


def _simplify(e: Expr, extents: Mapping[Var, int], memo: dict[Expr, Expr]) -> Expr:
    if isinstance(e, Load):
        return Load(e.buffer, tuple(simplify(i, extents, memo) for i in e.indices))
    if isinstance(e, BinOp) and e.dtype == INT:
        if e.op in ("//", "%", "min", "max"):
            return _simplify_nonlinear(e, extents, memo)
        a = affine(e, ())
        if a is None or e in a[0]:  # a product of two non-constant terms (opaque as a whole)
            x, y = simplify(e.a, extents, memo), simplify(e.b, extents, memo)
            prod = binop(e.op, x, y)
            # a side the ranges decided to a constant: the product is affine after all
            return simplify(prod, extents, memo) if isinstance(x, Const) or isinstance(y, Const) \
                else prod
        coefs: dict[Expr, int] = {}
        c = a[1]
        for term, k in a[0].items():
            if isinstance(term, Var):
                coefs[term] = coefs.get(term, 0) + k
                continue
            inner = affine(simplify(term, extents, memo), ())
            assert inner is not None
            for t2, k2 in inner[0].items():
                coefs[t2] = coefs.get(t2, 0) + k * k2
            c += k * inner[1]
        return from_affine({t: k for t, k in coefs.items() if k}, c)
    if isinstance(e, BinOp):
        return binop(e.op, simplify(e.a, extents, memo), simplify(e.b, extents, memo))
    if isinstance(e, Cmp):
        x, y = simplify(e.a, extents, memo), simplify(e.b, extents, memo)
        r = _range(binop("-", x, y), extents) if x.dtype == INT else None
        if r is not None:
            decided = _decide(e.op, r)
            if decided is not None:
                return Const(int(decided), "bool")
        return cmp(e.op, x, y)
    if isinstance(e, And):
        x, y = simplify(e.a, extents, memo), simplify(e.b, extents, memo)
        if isinstance(x, Const):
            return y if x.value else x
        if isinstance(y, Const):
            return x if y.value else y
        return And(x, y)
    if isinstance(e, Select):
        cond = simplify(e.cond, extents, memo)
        if isinstance(cond, Const):
            return simplify(e.t if cond.value else e.f, extents, memo)
        return Select(cond, simplify(e.t, extents, memo), simplify(e.f, extents, memo))
    return e


def _simplify_nonlinear(e: BinOp, extents: Mapping[Var, int], memo: dict[Expr, Expr]
                        ) -> Expr:
    x, y = simplify(e.a, extents, memo), simplify(e.b, extents, memo)
    if e.op in ("//", "%") and isinstance(y, Const) and y.value > 0:
        r = _divmod(x, int(y.value), e.op, extents)
        if r is not None:
            return r
    if e.op in ("min", "max"):
        rx, ry = _range(x, extents), _range(y, extents)
        if rx and ry:
            if rx[1] <= ry[0]:
                return x if e.op == "min" else y
            if ry[1] <= rx[0]:
                return y if e.op == "min" else x
    return binop(e.op, x, y)


def _decide(op: str, r: tuple[int, int]) -> bool | None:
    """Decide ``d op 0`` for d in the closed range r, when possible."""
    lo, hi = r
    if op == "<":
        yes, no = hi < 0, lo >= 0
    elif op == "<=":
        yes, no = hi <= 0, lo > 0
    elif op == ">":
        yes, no = lo > 0, hi <= 0
    elif op == ">=":
        yes, no = lo >= 0, hi < 0
    elif op == "==":
        yes, no = lo == hi == 0, lo > 0 or hi < 0
    else:  # "!="
        yes, no = lo > 0 or hi < 0, lo == hi == 0
    return True if yes else (False if no else None)


def index_range(e: Expr, extents: Mapping[Var, int]) -> tuple[int, int] | None:
    """Closed interval of an integer expression over the loop ranges, when it can be bounded."""
    return _range(e, extents)


def _range(e: Expr, extents: Mapping[Var, int]) -> tuple[int, int] | None:
    a = affine(e)
    if a is not None:
        r = affine_range(a[0], a[1], extents)
        if r is not None:
            return r
    return expr_range(e, extents)


def expr_range(e: Expr, extents: Mapping[Var, int]) -> tuple[int, int] | None:
    """Closed integer interval of ``e`` over vars in ``[0, extent)`` (interval arithmetic)."""
    return interval(e, _LoopRanges(extents))


class _LoopRanges(Mapping[Var, Interval]):
    """Loop extents read as the closed intervals ``[0, extent - 1]`` of their vars."""

    __slots__ = ("extents",)

    def __init__(self, extents: Mapping[Var, int]) -> None:
        self.extents = extents

    def __getitem__(self, v: Var) -> Interval:
        return 0, self.extents[v] - 1

    def get(self, v: Var, default: Interval | None = None) -> Interval | None:  # type: ignore[override]
        n = self.extents.get(v)
        return default if n is None else (0, n - 1)

    def __iter__(self) -> Iterator[Var]:
        return iter(self.extents)

    def __len__(self) -> int:
        return len(self.extents)


def interval(e: Expr, ranges: Mapping[Var, Interval]) -> Interval | None:
    """Closed integer interval of ``e`` given closed intervals of its vars (floor semantics
    for ``//`` and ``%``); None when it cannot be bounded. Code generators use this one."""
    if isinstance(e, Const):
        return None if e.dtype == FLOAT else (int(e.value), int(e.value))
    if isinstance(e, Var):
        return ranges.get(e)
    if isinstance(e, Select):
        t, f = interval(e.t, ranges), interval(e.f, ranges)
        return None if t is None or f is None else (min(t[0], f[0]), max(t[1], f[1]))
    if not isinstance(e, BinOp):
        return None
    a, b = interval(e.a, ranges), interval(e.b, ranges)
    if e.op == "%" and b is not None and b[0] > 0:
        if a is not None and b[0] == b[1] and a[0] // b[0] == a[1] // b[0]:
            return a[0] % b[0], a[1] % b[0]  # within one period of a constant divisor
        return a if a is not None and a[0] >= 0 and a[1] < b[0] else (0, b[1] - 1)
    if a is None or b is None:
        return None
    if e.op == "+":
        return a[0] + b[0], a[1] + b[1]
    if e.op == "-":
        return a[0] - b[1], a[1] - b[0]
    if e.op == "*":
        ps = [x * y for x in a for y in b]
        return min(ps), max(ps)
    if e.op == "//" and b[0] > 0:  # monotone in the dividend for a positive divisor
        qs = [x // y for x in a for y in b]
        return min(qs), max(qs)
    if e.op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    if e.op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    return None


def decide(c: Expr, ranges: Mapping[Var, Interval]) -> bool | None:
    """True/False when the var intervals decide the integer condition ``c``, else None."""
    if isinstance(c, Const):
        return bool(c.value)
    if isinstance(c, And):
        a, b = decide(c.a, ranges), decide(c.b, ranges)
        if a is False or b is False:
            return False
        return True if a and b else None
    if not isinstance(c, Cmp) or c.a.dtype == FLOAT:
        return None
    ia, ib = interval(c.a, ranges), interval(c.b, ranges)
    if ia is None or ib is None:
        return None
    return _decide(c.op, (ia[0] - ib[1], ia[1] - ib[0]))  # the range of a - b


def _divmod(x: Expr, d: int, op: str, extents: Mapping[Var, int]) -> Expr | None:
    a = affine(x, ())
    if a is None:
        return None
    coefs, c = a
    q = {v: k // d for v, k in coefs.items() if k % d == 0}
    rest = {v: k for v, k in coefs.items() if k % d != 0}
    r = affine_range(rest, c, extents)
    if r is None or r[0] // d != r[1] // d:
        return None
    shift = r[0] // d
    if op == "//":
        return from_affine(q, shift)
    return from_affine(rest, c - shift * d)


# ---------------------------------------------------------------- substitution / rewriting

def substitute(e: Expr, mapping: Mapping[Var, Expr]) -> Expr:
    """Replace vars in ``e`` by expressions."""
    return map_expr(e, lambda x: mapping.get(x) if isinstance(x, Var) else None)


def map_expr(e: Expr, fn: Callable[[Expr], Expr | None]) -> Expr:
    """Rebuild ``e`` bottom-up after ``fn`` (returning a replacement or None) is tried top-down."""
    r = fn(e)
    if r is not None:
        return r
    if isinstance(e, (Var, Const)):
        return e
    # an unchanged subtree is returned as is: rebuilding it would only allocate
    if isinstance(e, BinOp):
        a, b = map_expr(e.a, fn), map_expr(e.b, fn)
        return e if a is e.a and b is e.b else binop(e.op, a, b)
    if isinstance(e, Cmp):
        a, b = map_expr(e.a, fn), map_expr(e.b, fn)
        return e if a is e.a and b is e.b else cmp(e.op, a, b)
    if isinstance(e, And):
        a, b = map_expr(e.a, fn), map_expr(e.b, fn)
        return e if a is e.a and b is e.b else And(a, b)
    if isinstance(e, Select):
        c, t, f = map_expr(e.cond, fn), map_expr(e.t, fn), map_expr(e.f, fn)
        return e if c is e.cond and t is e.t and f is e.f else Select(c, t, f)
    if isinstance(e, Load):
        idx = tuple(map_expr(i, fn) for i in e.indices)
        return e if all(x is y for x, y in zip(idx, e.indices)) else Load(e.buffer, idx)
    raise TypeError(f"unknown expression {type(e).__name__}")


def map_stmt_exprs(s: Stmt, fn: Callable[[Expr], Expr]) -> Stmt:
    """Apply ``fn`` to every top-level expression of every statement in ``s``."""
    return _ExprMapper(fn).visit(s)


class _ExprMapper(StmtMutator):
    """`map_stmt_exprs`: a guard's condition and each leaf's expressions."""

    def __init__(self, fn: Callable[[Expr], Expr]) -> None:
        self.fn = fn

    def visit_if(self, s: IfThenElse) -> Stmt:
        return IfThenElse(self.fn(s.cond), self.visit(s.then),
                          None if s.else_ is None else self.visit(s.else_))

    def visit_leaf(self, s: Stmt) -> Stmt:
        fn = self.fn
        if isinstance(s, Store):
            return Store(s.buffer, tuple(fn(i) for i in s.indices), fn(s.value))
        if isinstance(s, (Sync, AsyncCommit, AsyncWait, Fence)):
            return s
        if isinstance(s, AtomicAdd):
            return AtomicAdd(s.result, tuple(fn(i) for i in s.result_index), s.buffer,
                             tuple(fn(i) for i in s.index), s.value)
        if isinstance(s, (MmaFill, MmaLoad, MmaSync, MmaStore, AsyncCopy)):
            return _map_tensor_core(s, fn)
        if isinstance(s, (WgmmaFence, WgmmaCommit, WgmmaWait, SetMaxNReg, NamedSync)):
            return s
        if isinstance(s, TmaLoad):
            return TmaLoad(s.dst, fn(s.dst_offset), s.tmap, tuple(fn(c) for c in s.coords),
                           s.bar, fn(s.bar_index))
        if isinstance(s, MbarrierInit):
            return MbarrierInit(s.bar, fn(s.index), s.count)
        if isinstance(s, MbarrierArrive):
            return MbarrierArrive(s.bar, fn(s.index), s.expect_bytes)
        if isinstance(s, MbarrierWait):
            return MbarrierWait(s.bar, fn(s.index), fn(s.parity))
        if isinstance(s, Wgmma):
            return Wgmma(s.acc, tuple(fn(i) for i in s.acc_index), _map_matrix(s.a, fn),
                         _map_matrix(s.b, fn), s.n)
        raise TypeError(f"unknown statement {type(s).__name__}")


def _map_tensor_core(s: Stmt, fn: Callable[[Expr], Expr]) -> Stmt:
    if isinstance(s, MmaFill):
        return MmaFill(s.frag, tuple(fn(i) for i in s.index), s.value, s.shape)
    if isinstance(s, MmaLoad):
        return MmaLoad(s.frag, tuple(fn(i) for i in s.index), s.src, fn(s.offset), s.ldm,
                       s.layout, s.shape)
    if isinstance(s, MmaSync):
        return MmaSync(s.acc, tuple(fn(i) for i in s.acc_index), s.a,
                       tuple(fn(i) for i in s.a_index), s.b, tuple(fn(i) for i in s.b_index),
                       s.shape)
    if isinstance(s, MmaStore):
        return MmaStore(s.dst, fn(s.offset), s.ldm, s.frag, tuple(fn(i) for i in s.index),
                        s.shape)
    assert isinstance(s, AsyncCopy), s
    return AsyncCopy(s.dst, fn(s.dst_offset), s.src, fn(s.src_offset), s.elems,
                     None if s.valid is None else fn(s.valid))


def _map_matrix(m: SmemMatrix, fn: Callable[[Expr], Expr]) -> SmemMatrix:
    return SmemMatrix(m.buffer, fn(m.offset), m.major, m.swizzle, m.lbo, m.sbo)


def stmt_exprs(s: Stmt) -> Iterator[Expr]:
    """Every top-level expression in ``s`` (indices, values, conditions), in program order."""
    for x in walk_stmts(s):
        if isinstance(x, Store):
            yield from x.indices
            yield x.value
        elif isinstance(x, IfThenElse):
            yield x.cond
        elif isinstance(x, MmaFill):
            yield from x.index
        elif isinstance(x, MmaLoad):
            yield from x.index
            yield x.offset
        elif isinstance(x, MmaSync):
            yield from (*x.acc_index, *x.a_index, *x.b_index)
        elif isinstance(x, MmaStore):
            yield x.offset
            yield from x.index
        elif isinstance(x, AsyncCopy):
            yield x.dst_offset
            yield x.src_offset
            if x.valid is not None:
                yield x.valid
        elif isinstance(x, AtomicAdd):
            yield from x.result_index
            yield from x.index
        elif isinstance(x, TmaLoad):
            yield x.dst_offset
            yield from x.coords
            yield x.bar_index
        elif isinstance(x, (MbarrierInit, MbarrierArrive)):
            yield x.index
        elif isinstance(x, MbarrierWait):
            yield x.index
            yield x.parity
        elif isinstance(x, Wgmma):
            yield from x.acc_index
            yield x.a.offset
            yield x.b.offset


def loads_of(s: Stmt, buffer: Buffer) -> list[Load]:
    """All loads of ``buffer`` in ``s``."""
    out = []
    for top in stmt_exprs(s):
        for e in walk(top):
            if isinstance(e, Load) and e.buffer is buffer:
                out.append(e)
    return out


def loop_extents(s: Stmt) -> dict[Var, int]:
    """Extents of every loop var defined inside ``s``."""
    out: dict[Var, int] = {}
    stack = [s]
    while stack:
        x = stack.pop()
        if isinstance(x, For):
            out[x.var] = x.extent
        stack.extend(x.children())
    return out
