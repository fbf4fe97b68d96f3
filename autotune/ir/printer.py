"""Readable text form of the loop AST (what ``print(autotune.lower(...))`` shows)."""
from __future__ import annotations

from autotune.ir.stmt import Allocate, For, ForKind, IfThenElse, PrimFunc, Seq, Stmt, Store, Sync


def format_stmt(s: Stmt, indent: int = 0) -> list[str]:
    pad = "  " * indent
    if isinstance(s, Seq):
        return [line for c in s.stmts for line in format_stmt(c, indent)]
    if isinstance(s, For):
        tag = "" if s.kind is ForKind.SERIAL else f"  # {s.kind.value}"
        return [f"{pad}for {s.var.name} in 0..{s.extent}:{tag}", *format_stmt(s.body, indent + 1)]
    if isinstance(s, Store):
        idx = ", ".join(map(repr, s.indices))
        return [f"{pad}{s.buffer.name}[{idx}] = {s.value!r}"]
    if isinstance(s, Allocate):
        b = s.buffer
        return [f"{pad}alloc {b.name}{list(b.shape)} {b.dtype} @{b.scope.value}",
                *format_stmt(s.body, indent)]
    if isinstance(s, IfThenElse):
        out = [f"{pad}if {s.cond!r}:", *format_stmt(s.then, indent + 1)]
        if s.else_ is not None:
            out += [f"{pad}else:", *format_stmt(s.else_, indent + 1)]
        return out
    if isinstance(s, Sync):
        return [f"{pad}sync_threads()"]
    raise TypeError(f"unknown statement {type(s).__name__}")


def format_func(f: PrimFunc) -> str:
    args = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in f.args)
    lines = [f"def {f.name}({args}):"]
    for w in f.workspaces:
        lines.append(f"  workspace {w.name}{list(w.shape)} {w.dtype}")
    lines += format_stmt(f.body, 1)
    return "\n".join(lines)
