"""Code generation backends (``llvm`` for CPUs, ``cuda`` for NVIDIA GPUs) behind one interface."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.codegen.backend import Backend
    from autotune.target import Target


def backend_for(target: Target) -> Backend:
    """The backend that compiles for ``target`` (imported on first use: llvmlite is heavy)."""
    if target.kind == "llvm":
        from autotune.codegen.llvm import BACKEND as llvm
        return llvm
    if target.kind == "cuda":
        from autotune.codegen.cuda import BACKEND as cuda
        return cuda
    raise ValueError(f"no code generator for target kind {target.kind!r}")
