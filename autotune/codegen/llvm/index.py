"""Index analyses the LLVM code generator needs: flattening, affine coefficients, value
ranges (to skip bound guards and pick unsigned division) and a statement's free names."""
from __future__ import annotations

from math import gcd
from typing import Mapping

from autotune.ir.analysis import Interval, interval, stmt_exprs
from autotune.ir.expr import BinOp, Const, Expr, Load, Var, add, mul, walk
from autotune.ir.stmt import Allocate, Buffer, For, Stmt, Store, walk_stmts


def flat_index(buffer: Buffer, indices: tuple[Expr, ...]) -> Expr:
    """Row-major element offset of ``buffer[indices]`` as one int64 expression."""
    out: Expr = Const(0)
    for idx, stride in zip(indices, buffer.strides):
        out = add(out, mul(idx, stride))
    return out


def depends_on(e: Expr, v: Var) -> bool:
    """Whether ``e`` reads ``v`` anywhere, load indices included."""
    return any(x is v for x in walk(e))


def affine_coeff(e: Expr, v: Var) -> int | None:
    """Constant ``c`` with ``e == e[v:=0] + c*v`` for every ``v``, or None when ``e`` is not
    affine in ``v`` with a constant coefficient (then lanes need a gather/scatter)."""
    if not depends_on(e, v):
        return 0
    if e is v:
        return 1
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        ca, cb = affine_coeff(e.a, v), affine_coeff(e.b, v)
        if ca is None or cb is None:
            return None
        return ca + cb if e.op == "+" else ca - cb
    if isinstance(e, BinOp) and e.op == "*":
        if isinstance(e.b, Const):
            c = affine_coeff(e.a, v)
            return None if c is None else c * int(e.b.value)
        if isinstance(e.a, Const):
            c = affine_coeff(e.b, v)
            return None if c is None else c * int(e.a.value)
    return None


def known_multiple(e: Expr, ranges: Mapping[Var, Interval], zero: Var | None = None) -> int:
    """A positive integer that provably divides ``e`` (``zero`` taken as 0; a var whose
    range is one value as that value); 0 counts as divisible by a large power of two."""
    if isinstance(e, Var):
        r = ranges.get(e)
        if e is zero or (r is not None and r[0] == r[1] == 0):
            return 1 << 20
        return abs(r[0]) if r is not None and r[0] == r[1] else 1
    if isinstance(e, Const):
        return abs(int(e.value)) or 1 << 20
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        return gcd(known_multiple(e.a, ranges, zero), known_multiple(e.b, ranges, zero))
    if isinstance(e, BinOp) and e.op == "*":
        return known_multiple(e.a, ranges, zero) * known_multiple(e.b, ranges, zero)
    return 1


def linear_form(e: Expr) -> dict[Var | None, int] | None:
    """``e`` as {var: coefficient, None: constant} when it is affine, else None."""
    if isinstance(e, Const):
        return {None: int(e.value)} if e.value else {}
    if isinstance(e, Var):
        return {e: 1}
    if isinstance(e, BinOp) and e.op in ("+", "-"):
        a, b = linear_form(e.a), linear_form(e.b)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "+" else -1
        out = dict(a)
        for k, c in b.items():
            out[k] = out.get(k, 0) + sign * c
        return {k: c for k, c in out.items() if c}
    if isinstance(e, BinOp) and e.op == "*":
        for x, y in ((e.a, e.b), (e.b, e.a)):
            if isinstance(y, Const):
                f = linear_form(x)
                return None if f is None else {k: c * int(y.value) for k, c in f.items()
                                                if c * int(y.value)}
    return None


def same_element(buffer: Buffer, a: tuple[Expr, ...], b: tuple[Expr, ...]) -> bool:
    """Whether two index tuples provably address the same element for all variable values."""
    if a == b:
        return True
    fa = linear_form(flat_index(buffer, a))
    return fa is not None and fa == linear_form(flat_index(buffer, b))


def in_bounds(buffer: Buffer, flat: Expr, ranges: Mapping[Var, Interval]) -> bool:
    """Whether the element offset ``flat`` provably lies inside ``buffer``."""
    r = interval(flat, ranges)
    return r is not None and r[0] >= 0 and r[1] < buffer.size


def free_names(s: Stmt) -> tuple[list[Var], list[Buffer]]:
    """Variables and buffers ``s`` uses but does not define itself, in first-use order."""
    bound_vars = {x.var for x in walk_stmts(s) if isinstance(x, For)}
    local_bufs = {x.buffer for x in walk_stmts(s) if isinstance(x, Allocate)}
    vars_: dict[Var, None] = {}
    bufs: dict[Buffer, None] = {}
    for x in walk_stmts(s):
        if isinstance(x, Store) and x.buffer not in local_bufs:
            bufs.setdefault(x.buffer)
    for e in stmt_exprs(s):
        for node in walk(e):
            if isinstance(node, Var) and node not in bound_vars:
                vars_.setdefault(node)
            elif isinstance(node, Load) and node.buffer not in local_bufs:
                bufs.setdefault(node.buffer)
    return list(vars_), list(bufs)
