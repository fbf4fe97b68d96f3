"""The one error of the CUDA execution model (``simulate``), apart so that every part of the
model raises it without importing the model's core."""
from __future__ import annotations


class CudaExecutionError(RuntimeError):
    """A kernel did something whose result a GPU does not define (see ``simulate``'s
    docstring).

    ``kind`` names the violation; ``buffer``, ``index``, ``block`` and ``thread`` (x, y, z)
    say where (``warp``, the warp's index in its block, for a warp-collective statement;
    ``thread`` is then its lane 0), ``other_thread`` names the second party of a race,
    ``statement`` the loop AST statement that did it."""

    def __init__(self, kind: str, message: str, *, buffer: str | None = None,
                 index: int | None = None, block: tuple[int, int, int] | None = None,
                 thread: tuple[int, int, int] | None = None,
                 other_thread: tuple[int, int, int] | None = None,
                 other_block: tuple[int, int, int] | None = None,
                 statement: str | None = None, warp: int | None = None):
        self.kind, self.buffer, self.index = kind, buffer, index
        self.block, self.thread, self.warp = block, thread, warp
        self.other_block, self.other_thread = other_block, other_thread
        self.statement = statement
        where = f"\n  in: {statement.strip()}" if statement else ""
        super().__init__(f"{kind}: {message}{where}")
