"""CUDA backend: loop AST to CUDA C, nvcc to a cubin, and a pycuda-launched ``CudaKernel``."""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

from autotune.codegen.backend import Artifact, Backend
from autotune.codegen.cuda.compiler import compile_cuda, generate_cuda
from autotune.codegen.cuda.runtime import load_cuda_kernel

if TYPE_CHECKING:
    from autotune.codegen.cuda.runtime import CudaKernel
    from autotune.ir.stmt import PrimFunc
    from autotune.target import Target


class CudaBackend:
    """The ``Backend`` for ``cuda`` targets."""

    kind = "cuda"

    # imports are deferred so that importing one module of this package (e.g. ``nvcc`` to
    # probe for the compiler) does not pull in the rest
    def source(self, func: PrimFunc, target: Target) -> str:
        """CUDA C before nvcc."""
        return generate_cuda(func, target)[0]

    def compile(self, func: PrimFunc, target: Target) -> Artifact:
        """CUDA C and its cubin; records the launch and ptxas resources in ``func.attrs``."""
        t0 = time.perf_counter()
        source, binary = compile_cuda(func, target)
        return Artifact(func, target.key, source, binary, time.perf_counter() - t0)

    def load(self, artifact: Artifact, target: Target) -> CudaKernel:
        """Wrap the cubin; it loads on the first call (``NoCudaDevice`` without a GPU)."""
        return load_cuda_kernel(artifact.func, target, artifact.source, artifact.binary)


BACKEND: Backend = CudaBackend()  # annotated: mypy checks it implements the interface
