"""CPU backend: loop AST to LLVM IR text, O3 object code, and a ctypes-called ``CpuKernel``."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from autotune.codegen.backend import Artifact, Backend

if TYPE_CHECKING:
    from autotune.codegen.llvm.runtime import CpuKernel
    from autotune.ir.stmt import PrimFunc
    from autotune.target import Target


class LlvmBackend:
    """The ``Backend`` for ``llvm`` targets."""

    kind = "llvm"

    # imports are deferred so that importing one module of this package (e.g. ``text``)
    # does not pull in llvmlite
    def source(self, func: PrimFunc, target: Target) -> str:
        """LLVM IR text before optimization."""
        from autotune.codegen.llvm.compiler import generate_llvm_ir
        return generate_llvm_ir(func, target)

    def compile(self, func: PrimFunc, target: Target) -> Artifact:
        """LLVM IR text and the host object code it optimizes to."""
        from autotune.codegen.llvm.compiler import compile_llvm_object
        t0 = time.perf_counter()
        source, binary = compile_llvm_object(func, target)
        return Artifact(func, target.key, source, binary, time.perf_counter() - t0)

    def load(self, artifact: Artifact, target: Target) -> CpuKernel:
        """Link the object code into this process."""
        from autotune.codegen.llvm.runtime import load_cpu_kernel
        return load_cpu_kernel(artifact.func, target, artifact.source, artifact.binary)


BACKEND: Backend = LlvmBackend()  # annotated: mypy checks it implements the interface
