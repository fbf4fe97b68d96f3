"""A reference interpreter of the loop AST: translates it to plain Python and runs it.

Slow but simple; it checks the indexing of a schedule's loop AST on small shapes.
Thread-bound loops run sequentially, so it says nothing of how a CUDA kernel's threads
share memory: the CUDA execution model (``autotune.codegen.cuda.simulate``) runs the
kernel as nvcc gets it, after the CUDA passes.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from autotune.ir.expr import And, BinOp, Cmp, Const, Expr, Load, Select, Var
from autotune.ir.stmt import Allocate, Buffer, For, IfThenElse, PrimFunc, Seq, Stmt, Store, Sync
from autotune.ir.visitor import StmtVisitor


class _Py(StmtVisitor):
    """The kernel as Python source lines, indented ``ind`` levels."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.lines: list[str] = []
        self.ind = 1

    def name(self, obj: Var | Buffer, prefix: str) -> str:
        key = id(obj)
        if key not in self.names:
            self.names[key] = f"{prefix}{len(self.names)}"
        return self.names[key]

    def expr(self, e: Expr) -> str:
        if isinstance(e, Var):
            return self.name(e, "v")
        if isinstance(e, Const):
            return repr(e.value)
        if isinstance(e, BinOp):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in ("min", "max"):
                return f"{e.op}({a}, {b})"
            return f"({a} {e.op} {b})"
        if isinstance(e, Cmp):
            return f"({self.expr(e.a)} {e.op} {self.expr(e.b)})"
        if isinstance(e, And):
            return f"({self.expr(e.a)} and {self.expr(e.b)})"
        if isinstance(e, Select):
            return f"({self.expr(e.t)} if {self.expr(e.cond)} else {self.expr(e.f)})"
        if isinstance(e, Load):
            return f"{self.name(e.buffer, 'b')}[{self.flat(e.buffer, e.indices)}]"
        raise TypeError(type(e).__name__)

    def flat(self, buf: Buffer, indices: Sequence[Expr]) -> str:
        terms = [f"{self.expr(i)}*{s}" if s != 1 else self.expr(i)
                 for i, s in zip(indices, buf.strides)]
        idx = " + ".join(terms) or "0"
        # an out-of-range index is a bug in lowering: make it fail loudly, not wrap around
        return f"_chk({idx}, {buf.size})"

    def line(self, text: str) -> None:
        self.lines.append("    " * self.ind + text)

    def visit_seq(self, s: Seq) -> None:
        if not s.stmts:
            self.line("pass")
        super().visit_seq(s)

    def visit_for(self, s: For) -> None:
        self.line(f"for {self.name(s.var, 'v')} in range({s.extent}):")
        self.indented(s.body)

    def visit_allocate(self, s: Allocate) -> None:
        self.line(f"{self.name(s.buffer, 'b')} = _np.full({s.buffer.size}, _np.nan)")
        self.visit(s.body)

    def visit_if(self, s: IfThenElse) -> None:
        self.line(f"if {self.expr(s.cond)}:")
        self.indented(s.then)
        if s.else_ is not None:
            self.line("else:")
            self.indented(s.else_)

    def visit_leaf(self, s: Stmt) -> None:
        if isinstance(s, Store):
            self.line(f"{self.name(s.buffer, 'b')}[{self.flat(s.buffer, s.indices)}]"
                      f" = {self.expr(s.value)}")
        elif isinstance(s, Sync):
            self.line("pass")
        else:
            raise TypeError(type(s).__name__)

    def indented(self, s: Stmt) -> None:
        self.ind += 1
        self.visit(s)
        self.ind -= 1


def _chk(i: int, n: int) -> int:
    if not 0 <= i < n:
        raise IndexError(f"index {i} out of range [0, {n})")
    return i


def interpret(func: PrimFunc, arrays: Sequence[np.ndarray]) -> None:
    """Run ``func`` on numpy arrays (inputs, then the output, written in place)."""
    if len(arrays) != len(func.args):
        raise ValueError(f"{func.name} takes {len(func.args)} arrays, got {len(arrays)}")
    py = _Py()
    params = [py.name(b, "b") for b in func.args]
    py.lines.append(f"def _kernel({', '.join(params)}):")
    for w in func.workspaces:
        py.lines.append(f"    {py.name(w, 'b')} = _np.full({w.size}, _np.nan)")
    py.visit(func.body)
    scope: dict = {"_np": np, "_chk": _chk}
    exec(compile("\n".join(py.lines), f"<interp {func.name}>", "exec"), scope)
    flat = [np.asarray(a, dtype=np.float64).reshape(-1).copy() for a in arrays]
    scope["_kernel"](*flat)
    out = arrays[-1]
    out[...] = flat[-1].reshape(out.shape).astype(out.dtype)
