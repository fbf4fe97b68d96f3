"""From (workload, target, config) to a schedule space, a loop AST and a compiled kernel.

``build`` and ``load`` split compilation in two so that a builder process can compile and a
runner process (owning the device) can load the result: the artifact is picklable.
"""
from __future__ import annotations

import time
from dataclasses import replace
from functools import lru_cache
from math import prod
from typing import TYPE_CHECKING

import numpy as np

from autotune.codegen import backend_for
from autotune.codegen.backend import Artifact
from autotune.ir.stmt import PrimFunc
from autotune.ops import Workload, WorkloadError
from autotune.ops.dtypes import to_float32
from autotune.ops.layout import NCHW, NHWC
from autotune.schedule.lower import LoweringError
from autotune.schedule.templates import WGMMA, template_for
from autotune.space import Config, ConfigSpace
from autotune.target import Target

if TYPE_CHECKING:
    from autotune.codegen.kernel import Kernel


class InvalidConfig(ValueError):
    """The config is not a valid point for this workload and target (an instantiation error)."""


@lru_cache(maxsize=256)
def config_space(workload: Workload, target: Target) -> ConfigSpace:
    """The schedule space of ``workload`` on ``target`` (cached: spaces are immutable); a
    `WorkloadError` at ``dtype`` when the target cannot run the workload's dtype. A
    prepacked workload has the space of its usual form, on llvm targets only."""
    workload.check_target(target)
    if workload.prepacked and target.kind != "llvm":
        # A CUDA kernel stages the weight through shared memory as given: the prepacked form
        # would be the same kernel under a second key, splitting its records in two.
        raise ValueError(f"the prepacked form is for llvm targets; {target.kind} kernels "
                         "read the constant operand as given (tune the usual form)")
    template = template_for(workload, target)
    if workload.layout == NHWC and template is not WGMMA:
        raise WorkloadError(f"{workload}: NHWC convolutions run on the Hopper wgmma kernels "
                            "only (float16 or bfloat16, C a multiple of 8, target cuda "
                            "-arch=sm_90a); use NCHW", ("layout",))
    if workload.layout not in (NCHW, NHWC) and target.kind != "llvm":
        raise WorkloadError(f"{workload}: blocked layouts run on llvm targets only; "
                            f"{target.kind} kernels read NCHW", ("layout",))
    return template.space(workload, target)


def kernel_family(workload: Workload, target: Target) -> str:
    """The template that makes ``workload``'s kernels on ``target`` (``cuda_wgmma``,
    ``cuda_tensorcore``, ``cpu_matmul``...): records train cost models of their own family
    only, since one template's features say nothing of another's speed."""
    return template_for(workload, target).family


def _as_config(sp: ConfigSpace, config: Config | int | dict | None) -> Config:
    if config is None:
        return sp.default()
    if isinstance(config, int):
        return sp.get(config)
    if isinstance(config, Config):
        return config
    return Config.from_json(config, sp)


def lower(workload: Workload, target: Target | str, config: Config | int | dict | None = None
          ) -> PrimFunc:
    """The loop AST of ``workload`` scheduled by ``config`` (default config when None); of a
    prepacked workload, the kernel that reads the operand packed (without the packing)."""
    target = Target(target) if isinstance(target, str) else target
    return _lower_parts(workload, target, config, prepack=workload.prepacked)[0]


def _lower_parts(workload: Workload, target: Target, config: Config | int | dict | None,
                 prepack: bool) -> tuple[PrimFunc, PrimFunc | None]:
    """The kernel's loop AST and, when ``prepack`` and the config packs a constant operand,
    the packing kernel's (a template that builds its loop AST itself packs nothing)."""
    cfg = _valid_config(workload, target, config)
    try:
        func, pack = template_for(workload, target).kernel(workload, target, cfg, prepack)
    except LoweringError as e:
        raise InvalidConfig(str(e)) from e
    for f in (func, pack):
        if f is None:
            continue
        f.attrs.update(workload=workload.key, config_index=cfg.index)
        shapes = _arg_shapes(workload, f)  # the packing kernel's operand too
        if shapes is not None:
            f.attrs["arg_shapes"] = shapes
    return func, pack


def _arg_shapes(workload: Workload, func: PrimFunc) -> tuple[tuple[int, ...], ...] | None:
    """The workload's argument shapes where the loop AST views an argument in another shape
    of the same size (a grouped conv's [N, C, H, W] data as [N*G, C/G, H, W]), so that the
    kernel takes the workload's arrays; None when every buffer has its argument's shape."""
    specs = {spec.name: spec.shape for spec in workload.arg_specs}
    shapes = tuple(specs[b.name] if b.name in specs and b.shape != specs[b.name]
                   and prod(specs[b.name]) == prod(b.shape) else b.shape for b in func.args)
    return None if shapes == tuple(b.shape for b in func.args) else shapes


def _valid_config(workload: Workload, target: Target, config: Config | int | dict | None
                  ) -> Config:
    sp = config_space(workload, target)
    cfg = _as_config(sp, config)
    reason = sp.invalid_reason(cfg)
    if reason:
        raise InvalidConfig(reason)
    return cfg


def build(workload: Workload, target: Target, config: Config | int | dict | None = None
          ) -> Artifact:
    """Lower and compile to a loadable binary (object code or cubin). Raises on failure.
    For a prepacked workload the artifact carries the packing kernel too (``pack``; None
    when the config packs nothing)."""
    t0 = time.perf_counter()
    artifact = _build(workload, target, config, prepack=workload.prepacked)
    return replace(artifact, build_s=time.perf_counter() - t0)  # lowering is part of it


def _build(workload: Workload, target: Target, config: Config | int | dict | None,
           prepack: bool) -> Artifact:
    func, pack_func = _lower_parts(workload, target, config, prepack)
    backend = backend_for(target)
    artifact = backend.compile(func, target)
    if pack_func is None:
        return artifact
    return replace(artifact, pack=backend.compile(pack_func, target))


def source(workload: Workload, target: Target, config: Config | int | dict | None = None
           ) -> str:
    """The generated source `build` would return (LLVM IR before O3, CUDA C before nvcc),
    without compiling it: cheap, and needs no device."""
    func = lower(workload, target, config)
    return backend_for(target).source(func, target)


def load(artifact: Artifact, target: Target) -> "Kernel":
    """Load a built artifact into a callable kernel in this process (its packing kernel, if
    it has one, as ``kernel.pack``)."""
    backend = backend_for(target)
    kernel = backend.load(artifact, target)
    if artifact.pack is not None:
        kernel.pack = backend.load(artifact.pack, target)
    return kernel


# The public name `autotune.compile` (exported lazily by autotune/__init__.py): kept.
def compile(workload: Workload, target: Target | str,  # noqa: A001
            config: Config | int | dict | None = None) -> "Kernel":
    """Compile ``workload`` with ``config`` (default config when None) into a callable kernel."""
    target = Target(target) if isinstance(target, str) else target
    return load(build(workload, target, config), target)


def compile_prepacked(workload: Workload, target: Target,
                      config: Config | int | dict | None = None
                      ) -> tuple["Kernel", "Kernel | None"]:
    """``(kernel, pack)`` for a constant operand (a conv's weight, matmul's B): ``kernel``
    takes the operand packed, as ``pack(operand, packed)`` writes it (run it once; see
    `autotune.schedule.prepack`). ``pack`` is None, and ``kernel`` the usual one, when the
    config packs no constant operand (always, for a template that builds its loop AST).
    `compile` of a prepacked workload gives the same."""
    kernel = load(_build(workload, target, config, prepack=True), target)
    return kernel, kernel.pack


def simulate_cuda(workload: Workload, config: Config | int | dict | None = None,
                  target: Target | str = "cuda -arch=sm_90", seed: int = 0, *,
                  block_seed: int | None = None, launches: int = 1) -> float:
    """Run the kernel ``compile`` would build for a CUDA target in the execution model
    (``autotune.codegen.cuda.simulate``: no GPU needed) on random inputs; return its largest
    error relative to the output's scale, ``max|out - ref| / max|ref|`` (half outputs
    widened exactly). Raises ``CudaExecutionError`` on a race, a read of unwritten memory,
    an out-of-bounds access, a barrier that only some threads reach, a warp-collective
    (wmma) statement that only part of a warp reaches or with operands that differ across
    it, a misaligned wmma or cp.async address, a touch of cp.async data still in flight,
    a split-K counter left non-zero, or a misuse of the Hopper statements (mbarrier
    parities and byte counts, stages read too early or overwritten too soon, descriptors,
    wgmma fences and waits, setmaxnreg; see ``simulate_hopper``) (its ``kind`` says
    which). ``block_seed``: run the
    blocks in an order drawn with it (default: index order); ``launches``: run that many
    times on the same workspaces, as a loaded kernel does (each launch's output is
    checked)."""
    from autotune.codegen.cuda.compiler import prepare_kernel
    from autotune.codegen.cuda.simulate import CudaExecutionError, run_kernel

    target = Target(target) if isinstance(target, str) else target
    if target.kind != "cuda":
        raise ValueError(f"target {target} is not a CUDA target")
    func = lower(workload, target, config)
    body, launch = prepare_kernel(func, target)
    args = workload.random_args(seed)
    ref = np.asarray(workload.reference(args[:-1]), dtype=np.float64)
    scale = float(np.max(np.abs(ref), initial=0.0)) or 1.0
    order = (None if block_seed is None else
             np.random.default_rng(block_seed).permutation(int(np.prod(launch.grid))))
    # allocated once, as a loaded kernel does: later launches start from what it left
    scratch: list[np.ndarray] = [np.zeros(w.size, np.float32) for w in func.workspaces]
    unset = args[-1].copy()  # as random_args left it: NaN
    err = 0.0
    for _ in range(launches):
        args[-1][...] = unset
        run_kernel(func, body, launch, args, block_order=order, scratch=scratch)
        out: np.ndarray = to_float32(args[-1], workload.dtype).astype(np.float64)  # exact
        nan = np.isnan(out)
        if nan.any():
            at = tuple(int(i) for i in np.unravel_index(int(np.argmax(nan)), out.shape))
            raise CudaExecutionError("unwritten_output", f"{int(nan.sum())} of {out.size} "
                                     f"output elements were never written (the first at "
                                     f"{at})", buffer=func.args[-1].name)
        err = max(err, float(np.max(np.abs(out - ref), initial=0.0)) / scale)
    return err
