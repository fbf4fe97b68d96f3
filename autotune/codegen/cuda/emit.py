"""CUDA C text of a prepared loop AST (see ``passes.prepare``).

blockIdx/threadIdx loops become index constants, vthread and unrolled loops ``#pragma
unroll`` loops, local buffers register arrays, shared buffers ``__shared__`` arrays at
function scope, ``Sync`` ``__syncthreads()``. Index arithmetic is ``int`` unless a buffer is
large enough to need ``long long``.
"""
from __future__ import annotations

import re

from autotune.codegen.cuda.passes import Launch, shared_buffers
from autotune.ir.analysis import Interval, interval, loop_extents, simplify
from autotune.ir.expr import FLOAT, And, BinOp, Cmp, Const, Expr, Load, Select, Var, add, mul
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
    walk_stmts,
)

# floor division and modulo for operands that may be negative (C rounds toward zero)
PRELUDE = """\
#ifndef AT_CUDA_PRELUDE
#define AT_CUDA_PRELUDE
template <typename T> static __device__ __forceinline__ T at_floordiv(T a, T b) {
  T q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> static __device__ __forceinline__ T at_floormod(T a, T b) {
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
#endif
"""

_LAUNCH_INDEX = {ForKind.BLOCK_X: "blockIdx.x", ForKind.BLOCK_Y: "blockIdx.y",
                 ForKind.BLOCK_Z: "blockIdx.z", ForKind.THREAD_X: "threadIdx.x",
                 ForKind.THREAD_Y: "threadIdx.y", ForKind.THREAD_Z: "threadIdx.z"}
_KEYWORDS = {"int", "float", "for", "if", "else", "const", "do", "while", "return", "char",
             "long", "short", "auto", "break", "case", "default", "switch", "void", "min",
             "max", "threadIdx", "blockIdx", "blockDim", "gridDim", "signed", "unsigned"}
# C precedence levels used to print the fewest parentheses
_PREC = {"?": 1, "||": 2, "&&": 3, "==": 4, "!=": 4, "<": 5, "<=": 5, ">": 5, ">=": 5,
         "+": 6, "-": 6, "*": 7, "/": 7, "%": 7}
_ATOM = 9
_INT_LIMIT = 2**31 // 8  # beyond this many elements an overhanging tile index may overflow int


class _Names:
    def __init__(self) -> None:
        self.by_id: dict[int, str] = {}
        self.used: set[str] = set()

    def __call__(self, obj: Var | Buffer) -> str:
        key = id(obj)
        if key not in self.by_id:
            base = re.sub(r"\W", "_", obj.name) or "v"
            if base[0].isdigit() or base in _KEYWORDS or base.startswith("at_"):
                base = "v_" + base
            name, n = base, 1
            while name in self.used:
                name, n = f"{base}_{n}", n + 1
            self.used.add(name)
            self.by_id[key] = name
        return self.by_id[key]


def emit_kernel(func: PrimFunc, body: Stmt, launch: Launch, name: str) -> str:
    """The ``extern "C" __global__`` definition of kernel ``name`` (without the prelude)."""
    return _Emitter(func, body, launch).kernel(name)


class _Emitter:
    def __init__(self, func: PrimFunc, body: Stmt, launch: Launch):
        self.func, self.body, self.launch = func, body, launch
        self.names = _Names()
        self.lines: list[str] = []
        self.ext = loop_extents(body)
        self.ranges: dict[Var, Interval] = {}
        self.itype = "long long" if index_bits(func) == 64 else "int"

    # ------------------------------------------------------------------ structure
    def kernel(self, name: str) -> str:
        stored = {s.buffer for s in walk_stmts(self.body) if isinstance(s, Store)}
        params = []
        for b in (*self.func.args, *self.func.workspaces):
            const = "" if b in stored else "const "
            params.append(f"{const}float* __restrict__ {self.names(b)}")
        bounds_ = self.launch.threads
        head = f'extern "C" __global__ void __launch_bounds__({bounds_}) {name}('
        self.lines.append(head + ", ".join(params) + ") {")
        for b in dict.fromkeys(shared_buffers(self.func.body)):
            self.lines.append(f"  __shared__ __align__(16) float {self.names(b)}[{b.size}];")
        self.stmt(self.body, 1)
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    def stmt(self, s: Stmt, ind: int) -> None:
        pad = "  " * ind
        if isinstance(s, Seq):
            for c in s.stmts:
                self.stmt(c, ind)
        elif isinstance(s, For):
            self._for(s, ind)
        elif isinstance(s, Store):
            self._store(s, pad)
        elif isinstance(s, Allocate):
            if s.buffer.scope is not Scope.SHARED:  # shared ones are declared up front
                self.lines.append(f"{pad}float {self.names(s.buffer)}[{s.buffer.size}];")
            self.stmt(s.body, ind)
        elif isinstance(s, IfThenElse):
            self.lines.append(f"{pad}if ({self.expr(s.cond)}) {{")
            self.stmt(s.then, ind + 1)
            if s.else_ is not None:
                self.lines.append(f"{pad}}} else {{")
                self.stmt(s.else_, ind + 1)
            self.lines.append(f"{pad}}}")
        elif isinstance(s, Sync):
            self.lines.append(f"{pad}__syncthreads();")
        else:
            raise TypeError(f"unknown statement {type(s).__name__}")

    def _for(self, s: For, ind: int) -> None:
        pad = "  " * ind
        v = self.names(s.var)
        self.ranges[s.var] = (0, s.extent - 1)
        index = _LAUNCH_INDEX.get(s.kind)
        if index is not None:
            self.lines.append(f"{pad}const {self.itype} {v} = {index};")
            self.stmt(s.body, ind)
            return
        if s.extent == 1:
            self.lines.append(f"{pad}const {self.itype} {v} = 0;")
            self.stmt(s.body, ind)
            return
        if s.kind in (ForKind.UNROLLED, ForKind.VTHREAD):
            self.lines.append(f"{pad}#pragma unroll")
        self.lines.append(f"{pad}for ({self.itype} {v} = 0; {v} < {s.extent}; ++{v}) {{")
        self.stmt(s.body, ind + 1)
        self.lines.append(f"{pad}}}")

    def _store(self, s: Store, pad: str) -> None:
        target = self._ref(s.buffer, s.indices)
        v = s.value
        if (isinstance(v, BinOp) and v.op == "+" and isinstance(v.a, Load)
                and v.a.buffer is s.buffer and v.a.indices == s.indices):
            self.lines.append(f"{pad}{target} += {self.expr(v.b)};")
        else:
            self.lines.append(f"{pad}{target} = {self.expr(v)};")

    # ------------------------------------------------------------------ expressions
    def _ref(self, b: Buffer, indices: tuple[Expr, ...]) -> str:
        return f"{self.names(b)}[{self.expr(flat_index(b, indices, self.ext))}]"

    def expr(self, e: Expr) -> str:
        return self._expr(e)[0]

    def _expr(self, e: Expr) -> tuple[str, int]:
        """Text of ``e`` and its precedence (higher binds tighter)."""
        if isinstance(e, Var):
            return self.names(e), _ATOM
        if isinstance(e, Const):
            return _const(e), _ATOM
        if isinstance(e, Load):
            return self._ref(e.buffer, e.indices), _ATOM
        if isinstance(e, Select):
            c, t, f = self._sub(e.cond, 2), self._sub(e.t, 2), self._sub(e.f, 1)
            return f"{c} ? {t} : {f}", _PREC["?"]
        if isinstance(e, And):
            return f"{self._sub(e.a, 3)} && {self._sub(e.b, 4)}", _PREC["&&"]
        if isinstance(e, Cmp):
            p = _PREC[e.op]
            return f"{self._sub(e.a, p)} {e.op} {self._sub(e.b, p + 1)}", p
        if isinstance(e, BinOp):
            return self._binop(e)
        raise TypeError(f"unknown expression {type(e).__name__}")

    def _binop(self, e: BinOp) -> tuple[str, int]:
        if e.op in ("min", "max"):
            fn = ("fminf" if e.op == "min" else "fmaxf") if e.dtype == FLOAT else e.op
            return f"{fn}({self.expr(e.a)}, {self.expr(e.b)})", _ATOM
        if e.op in ("//", "%"):
            if not c_division(e, self.ranges):
                fn = "at_floordiv" if e.op == "//" else "at_floormod"
                return f"{fn}<{self.itype}>({self.expr(e.a)}, {self.expr(e.b)})", _ATOM
            op = "/" if e.op == "//" else "%"
        else:
            op = e.op
        p = _PREC[op]
        return f"{self._sub(e.a, p)} {op} {self._sub(e.b, p + 1)}", p

    def _sub(self, e: Expr, min_prec: int) -> str:
        text, p = self._expr(e)
        return text if p >= min_prec else f"({text})"


def index_bits(func: PrimFunc) -> int:
    """Width of the kernel's index arithmetic: 64 bits once a buffer is large enough that
    an overhanging tile's index may overflow a 32-bit ``int``."""
    big = max([b.size for b in (*func.args, *func.workspaces)] or [0]) > _INT_LIMIT
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


def _const(e: Const) -> str:
    if e.dtype == FLOAT:
        v = float(e.value)
        if v != v:
            return "__int_as_float(0x7fffffff)"
        if v in (float("inf"), float("-inf")):
            return ("-" if v < 0 else "") + "__int_as_float(0x7f800000)"
        return f"{v!r}f"
    if e.dtype == "bool":
        return "true" if e.value else "false"
    v = int(e.value)
    return f"{v}LL" if not -2**31 <= v < 2**31 else str(v)
