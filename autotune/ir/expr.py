"""Expression nodes of the loop IR.

Index arithmetic is int64, tensor data float32; float16 and bfloat16 buffers are storage
types (loading one gives float32, storing into one rounds to nearest even). Nodes are
immutable; ``Var`` compares by identity (two loops may share a name), every other node by
structure, with its hash computed once at construction (lowering keys its simplification
cache by expression).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Union

if TYPE_CHECKING:
    from autotune.ir.stmt import Buffer

INT = "int64"
FLOAT = "float32"
BOOL = "bool"
# storage-only float types: a Load of such a buffer reads float32, a Store rounds to nearest
HALF_DTYPES = ("float16", "bfloat16")

ExprLike = Union["Expr", int, float]


class Expr:
    """Base of all expressions. Arithmetic operators build nodes (with constant folding)."""

    __slots__ = ("dtype",)
    dtype: str

    def __add__(self, o: ExprLike) -> "Expr":
        return add(self, o)

    def __radd__(self, o: ExprLike) -> "Expr":
        return add(o, self)

    def __sub__(self, o: ExprLike) -> "Expr":
        return sub(self, o)

    def __rsub__(self, o: ExprLike) -> "Expr":
        return sub(o, self)

    def __mul__(self, o: ExprLike) -> "Expr":
        return mul(self, o)

    def __rmul__(self, o: ExprLike) -> "Expr":
        return mul(o, self)

    def __floordiv__(self, o: ExprLike) -> "Expr":
        return floordiv(self, o)

    def __mod__(self, o: ExprLike) -> "Expr":
        return mod(self, o)

    def children(self) -> tuple["Expr", ...]:
        return ()


class Var(Expr):
    """A loop or index variable (int64)."""

    __slots__ = ("name",)

    def __init__(self, name: str, dtype: str = INT):
        self.name = name
        self.dtype = dtype

    def __reduce__(self) -> tuple:  # compiled (mypyc) classes pickle through their __init__
        return Var, (self.name, self.dtype)

    def __repr__(self) -> str:
        return self.name


class Const(Expr):
    __slots__ = ("value", "_hash")

    def __init__(self, value: int | float, dtype: str | None = None):
        if dtype is None:
            dtype = FLOAT if isinstance(value, float) else INT
        self.value = float(value) if dtype == FLOAT else int(value)
        self.dtype = dtype
        self._hash = hash((self.value, dtype))

    def __repr__(self) -> str:
        return repr(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and other.value == self.value and other.dtype == self.dtype

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:  # rebuild: the cached hash is process-specific
        return Const, (self.value, self.dtype)


class BinOp(Expr):
    """``op`` is one of ``+ - * / // % min max`` (``//`` and ``%`` are floor division/modulo
    of integers, ``/`` the division of floats)."""

    __slots__ = ("op", "a", "b", "_hash")
    OPS = ("+", "-", "*", "/", "//", "%", "min", "max")

    def __init__(self, op: str, a: Expr, b: Expr):
        assert op in self.OPS, op
        self.op, self.a, self.b = op, a, b
        self.dtype = a.dtype
        self._hash = hash((op, a, b))

    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, BinOp) and other.op == self.op
                and other.a == self.a and other.b == self.b)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:  # rebuild: the cached hash may hold a Var's id
        return BinOp, (self.op, self.a, self.b)

    def __repr__(self) -> str:
        if self.op in ("min", "max"):
            return f"{self.op}({self.a!r}, {self.b!r})"
        return f"({self.a!r} {self.op} {self.b!r})"


class Cmp(Expr):
    """Comparison ``< <= > >= == !=``; result dtype bool."""

    __slots__ = ("op", "a", "b", "_hash")
    OPS = ("<", "<=", ">", ">=", "==", "!=")

    def __init__(self, op: str, a: Expr, b: Expr):
        assert op in self.OPS, op
        self.op, self.a, self.b = op, a, b
        self.dtype = BOOL
        self._hash = hash(("cmp", op, a, b))

    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Cmp) and other.op == self.op
                and other.a == self.a and other.b == self.b)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        return Cmp, (self.op, self.a, self.b)

    def __repr__(self) -> str:
        return f"({self.a!r} {self.op} {self.b!r})"


class And(Expr):
    __slots__ = ("a", "b", "_hash")

    def __init__(self, a: Expr, b: Expr):
        self.a, self.b, self.dtype = a, b, BOOL
        self._hash = hash(("and", a, b))

    def children(self) -> tuple[Expr, ...]:
        return (self.a, self.b)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, And) and other.a == self.a and other.b == self.b

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        return And, (self.a, self.b)

    def __repr__(self) -> str:
        return f"({self.a!r} && {self.b!r})"


class Select(Expr):
    """``cond ? t : f``; both arms may be evaluated (they must be safe to evaluate)."""

    __slots__ = ("cond", "t", "f", "_hash")

    def __init__(self, cond: Expr, t: Expr, f: Expr):
        self.cond, self.t, self.f = cond, t, f
        self.dtype = t.dtype
        self._hash = hash(("select", cond, t, f))

    def children(self) -> tuple[Expr, ...]:
        return (self.cond, self.t, self.f)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Select) and other.cond == self.cond
                and other.t == self.t and other.f == self.f)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        return Select, (self.cond, self.t, self.f)

    def __repr__(self) -> str:
        return f"select({self.cond!r}, {self.t!r}, {self.f!r})"


class Load(Expr):
    """Read ``buffer[indices]`` (one index per buffer dimension)."""

    __slots__ = ("buffer", "indices", "_hash")

    def __init__(self, buffer: "Buffer", indices: tuple[Expr, ...]):
        assert len(indices) == len(buffer.shape), (buffer.name, indices)
        self.buffer, self.indices = buffer, tuple(indices)
        self.dtype = FLOAT if buffer.dtype in HALF_DTYPES else buffer.dtype
        self._hash = hash(("load", id(buffer), self.indices))

    def children(self) -> tuple[Expr, ...]:
        return self.indices

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Load) and other.buffer is self.buffer
                and other.indices == self.indices)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:  # rebuild: the cached hash holds the buffer's id
        return Load, (self.buffer, self.indices)

    def __repr__(self) -> str:
        return f"{self.buffer.name}[{', '.join(map(repr, self.indices))}]"


def const(x: ExprLike, like: Expr | None = None) -> Expr:
    """Wrap a Python number as a ``Const`` (float if ``like`` is float)."""
    if isinstance(x, Expr):
        return x
    if like is not None and like.dtype == FLOAT:
        return Const(float(x), FLOAT)
    if isinstance(x, int) and _SMALL_MIN <= x < _SMALL_END:
        return _SMALL_INTS[x - _SMALL_MIN]
    return Const(x)


# index arithmetic builds its small constants again and again: share them (Const is immutable)
_SMALL_MIN, _SMALL_END = -64, 1025
_SMALL_INTS = tuple(Const(i) for i in range(_SMALL_MIN, _SMALL_END))


def _fold(op: str, a: int | float, b: int | float) -> int | float:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / b
    if op == "//":
        return a // b
    if op == "%":
        return a % b
    if op == "min":
        return min(a, b)
    return max(a, b)


def binop(op: str, a: ExprLike, b: ExprLike) -> Expr:
    """Build ``a op b`` with constant folding and the identities x+0, x*1, x*0, x//1, x%1."""
    ea = const(a, b if isinstance(b, Expr) else None)
    eb = const(b, ea)
    if isinstance(ea, Const) and isinstance(eb, Const):
        return Const(_fold(op, ea.value, eb.value), ea.dtype)
    if isinstance(eb, Const):
        v = eb.value
        if (op in ("+", "-") and v == 0) or (op in ("*", "/", "//") and v == 1):
            return ea
        if op == "*" and v == 0 and ea.dtype == INT:
            return eb
        if op == "%" and v == 1:
            return Const(0)
    if isinstance(ea, Const):
        v = ea.value
        if op == "+" and v == 0:
            return eb
        if op == "*" and v == 1:
            return eb
        if op == "*" and v == 0 and eb.dtype == INT:
            return ea
    return BinOp(op, ea, eb)


def add(a: ExprLike, b: ExprLike) -> Expr:
    return binop("+", a, b)


def sub(a: ExprLike, b: ExprLike) -> Expr:
    return binop("-", a, b)


def mul(a: ExprLike, b: ExprLike) -> Expr:
    return binop("*", a, b)


def div(a: ExprLike, b: ExprLike) -> Expr:
    """``a / b`` of floats."""
    return binop("/", a, b)


def floordiv(a: ExprLike, b: ExprLike) -> Expr:
    return binop("//", a, b)


def mod(a: ExprLike, b: ExprLike) -> Expr:
    return binop("%", a, b)


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return binop("min", a, b)


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    return binop("max", a, b)


def cmp(op: str, a: ExprLike, b: ExprLike) -> Expr:
    ea, eb = const(a), const(b)
    if isinstance(ea, Const) and isinstance(eb, Const):
        r = {"<": ea.value < eb.value, "<=": ea.value <= eb.value, ">": ea.value > eb.value,
             ">=": ea.value >= eb.value, "==": ea.value == eb.value,
             "!=": ea.value != eb.value}[op]
        return Const(int(r), BOOL)
    return Cmp(op, ea, eb)


def all_of(conds: list[Expr]) -> Expr | None:
    """Conjunction of conditions, dropping constant-true ones; ``None`` when all are true."""
    out: Expr | None = None
    for c in conds:
        if isinstance(c, Const):
            if c.value:
                continue
            return c
        out = c if out is None else And(out, c)
    return out


def walk(e: Expr) -> Iterator[Expr]:
    """Pre-order traversal of an expression tree."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(x.children())
