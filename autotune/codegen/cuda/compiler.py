"""CUDA code generation: a ``PrimFunc`` to CUDA C, and nvcc to a cubin.

``compile_cuda(func, target) -> (source, cubin)`` is the CUDA backend's ``compile``; it also
records ``func.attrs["launch"]`` (grid, block, static and dynamic shared bytes),
``func.attrs["cuda_kernel"]`` (the entry's name) and ``func.attrs["cuda_resources"]``
(ptxas registers, spills...).
``compile_cuda_with_info`` returns the same as a ``CudaBinary``; ``compile_cuda_batch``
compiles many kernels with one nvcc call.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from math import ceil
from typing import Sequence

from autotune.codegen.cuda.emit import PRELUDE, emit_kernel, headers
from autotune.codegen.cuda.hopper import prelude as hopper_prelude
from autotune.codegen.cuda.nvcc import (
    CudaCompileError,
    Resources,
    find_nvcc,
    nvcc_cubin,
    parse_ptxas,
)
from autotune.codegen.cuda.passes import CudaCodegenError, Launch, launch_of, prepare
from autotune.ir.stmt import PrimFunc, Stmt
from autotune.target import CudaLimits, Target

__all__ = ["CudaBinary", "CudaCodegenError", "CudaCompileError", "CudaResourceError",
           "Launch", "Resources", "compile_cuda", "compile_cuda_batch",
           "compile_cuda_with_info", "find_nvcc", "generate_cuda"]


NVCC_OPTIONS: tuple[str, ...] = ("-O3",)


class CudaResourceError(CudaCompileError):
    """The compiled kernel needs more registers or shared memory than a block may have."""


@dataclass(frozen=True)
class CudaBinary:
    """A compiled kernel: entry name, CUDA C source, cubin, launch config, ptxas resources."""

    name: str
    source: str
    cubin: bytes
    launch: Launch
    resources: Resources


def kernel_name(func: PrimFunc) -> str:
    return re.sub(r"\W", "_", func.name) or "kernel"


def generate_cuda(func: PrimFunc, target: Target, name: str | None = None
                  ) -> tuple[str, Launch]:
    """CUDA C (prelude + one kernel) and its launch config; raises CudaCodegenError when the
    launch breaks the target's limits or the AST has no correct CUDA form."""
    body, launch = prepare_kernel(func, target)
    kernel = emit_kernel(func, body, launch, name or kernel_name(func))
    return headers(func) + PRELUDE + hopper_prelude(body) + "\n" + kernel, launch


def prepare_kernel(func: PrimFunc, target: Target) -> tuple[Stmt, Launch]:
    """The kernel body after every CUDA pass (what the emitter prints, statement for
    statement) and its launch; raises CudaCodegenError as ``generate_cuda`` does."""
    lim = _limits(target)
    launch = launch_of(func, lim.max_shared_per_block)
    reason = launch_reason(launch, lim)
    if reason:
        raise CudaCodegenError(f"{func.name}: {reason}")
    return prepare(func, launch), launch


def launch_reason(launch: Launch, lim: CudaLimits) -> str | None:
    """Why a launch breaks the device limits, or None."""
    if launch.threads > lim.max_threads_per_block:
        return f"{launch.threads} threads per block > limit {lim.max_threads_per_block}"
    for axis, n, cap in zip("xyz", launch.block, lim.max_block_dim):
        if n > cap:
            return f"block dim {axis} = {n} > limit {cap}"
    for axis, n, cap in zip("xyz", launch.grid, lim.max_grid_dim):
        if n > cap:
            return f"grid dim {axis} = {n} > limit {cap}"
    if launch.shared_bytes > lim.max_shared_per_block:
        return (f"{launch.shared_bytes} bytes of static shared memory > limit "
                f"{lim.max_shared_per_block}")
    total = launch.shared_bytes + launch.dynamic_shared_bytes
    if total > lim.max_shared_per_block_optin:
        return (f"{total} bytes of shared memory > opt-in limit "
                f"{lim.max_shared_per_block_optin} of {lim.arch}")
    return None


def resource_reason(res: Resources, launch: Launch, lim: CudaLimits) -> str | None:
    """Why the compiled kernel cannot launch with ``launch`` on this device, or None."""
    warps = ceil(launch.threads / lim.warp_size)
    # registers are allocated per warp in units of 256
    per_warp = ceil(res.registers * lim.warp_size / 256) * 256
    if warps * per_warp > lim.regs_per_block:
        return (f"{res.registers} registers x {launch.threads} threads exceed "
                f"{lim.regs_per_block} registers per block")
    if res.shared_bytes > lim.max_shared_per_block:
        return f"{res.shared_bytes} bytes of shared memory > limit {lim.max_shared_per_block}"
    total = res.shared_bytes + launch.dynamic_shared_bytes
    if total > lim.max_shared_per_block_optin:
        return (f"{total} bytes of shared memory > opt-in limit "
                f"{lim.max_shared_per_block_optin} of {lim.arch}")
    return None


def compile_cuda_with_info(func: PrimFunc, target: Target) -> CudaBinary:
    """Generate, compile and check one kernel; records launch and resources in func.attrs."""
    out = compile_cuda_batch([func], target)[0]
    if isinstance(out, Exception):
        raise out
    return out


def compile_cuda(func: PrimFunc, target: Target) -> tuple[str, bytes]:
    """(CUDA C source, cubin) of ``func``; see the module docstring for func.attrs."""
    b = compile_cuda_with_info(func, target)
    return b.source, b.cubin


def compile_cuda_batch(funcs: Sequence[PrimFunc], target: Target,
                       options: Sequence[str] = NVCC_OPTIONS) -> list[CudaBinary | Exception]:
    """Compile many kernels with one nvcc call (kernels named ``<name>_<i>``, all in one
    cubin); a kernel that fails gets its exception in its slot (on a batch failure each
    kernel is compiled alone to find the culprits). ``options`` go to nvcc."""
    out: list[CudaBinary | Exception | None] = [None] * len(funcs)
    gen: list[tuple[int, str, str, Launch]] = []
    for i, f in enumerate(funcs):
        name = kernel_name(f) if len(funcs) == 1 else f"{kernel_name(f)}_{i}"
        try:
            src, launch = generate_cuda(f, target, name)
        except CudaCodegenError as e:
            out[i] = e
            continue
        gen.append((i, name, src, launch))
    if gen:
        arch = _limits(target).arch
        try:
            cubin, log = nvcc_cubin("\n".join(src for _, _, src, _ in gen), arch, options)
        except CudaCompileError as e:
            if len(gen) == 1:
                out[gen[0][0]] = e
                gen = []
            else:  # find the culprits: compile each alone
                for i, *_ in gen:
                    out[i] = _alone(funcs[i], target, options)
                gen = []
        if gen:
            res = parse_ptxas(log)
            for i, name, src, launch in gen:
                out[i] = _finish(funcs[i], target, name, src, cubin, launch,
                                 res.get(name, Resources()))
    return out  # type: ignore[return-value]


def _alone(func: PrimFunc, target: Target, options: Sequence[str]) -> CudaBinary | Exception:
    return compile_cuda_batch([func], target, options)[0]


def _finish(func: PrimFunc, target: Target, name: str, source: str, cubin: bytes,
            launch: Launch, res: Resources) -> CudaBinary | Exception:
    reason = resource_reason(res, launch, _limits(target))
    func.attrs.update(launch=launch.to_dict(), cuda_kernel=name,
                      cuda_resources=res.to_dict())
    if reason:
        return CudaResourceError(f"{func.name}: {reason}")
    return CudaBinary(name, source, cubin, launch, res)


def _limits(target: Target) -> CudaLimits:
    if target.cuda is None:
        raise ValueError(f"target {target} is not a CUDA target")
    return target.cuda
