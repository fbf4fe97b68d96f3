"""A model's CPU kernels built side by side: each build (Python IR emission, then LLVM's O3
and code generation) runs in one of the host's cores' worker processes, and the object
code is linked here as it arrives.

Inception-V3's 55 kernels took 10.3 s one after another on 2 cores, about half of it
emitting IR in Python and half in LLVM; neither lets a second thread in (the GIL, and
llvmlite's global lock), so only processes build in parallel. Workers start in about
0.4 s, so a model with few kernels builds in this process, as does a kernel whose worker
failed (where its error, if it has one, is raised as usual). ``AUTOTUNE_BUILD_WORKERS``
caps the workers (1: none), e.g. where other processes already keep every core busy.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from autotune.codegen.backend import Artifact
from autotune.driver import compile as compile_kernel
from autotune.driver import load
from autotune.measure.builder import LocalBuilder
from autotune.measure.result import MeasureInput, MeasureUnavailable
from autotune.settings import Settings
from autotune.target import Target, host_cores

if TYPE_CHECKING:
    from autotune.codegen.kernel import Kernel
    from autotune.ops import Workload
    from autotune.space import Config

PARALLEL_MIN = 8        # distinct kernels below which workers cost more than they save
BUILD_TIMEOUT_S = 600.0  # one kernel's build in a worker; past it, it is built here


def build_kernels(configs: Mapping[Workload, Config], target: Target,
                  workers: int | None = None) -> dict[Workload, Kernel]:
    """A kernel per workload of ``configs``, built with its config: on llvm targets in up to
    ``workers`` processes (None: the `build_workers` setting, whose 0 is the host's cores)
    when there are enough of them."""
    if workers is None:
        workers = Settings().build_workers
    n = min(workers or host_cores(), len(configs))
    built: dict[Workload, Kernel] = {}
    if target.kind == "llvm" and n >= 2 and len(configs) >= PARALLEL_MIN:
        items = list(configs.items())
        inputs = [MeasureInput(wl, target, cfg) for wl, cfg in items]
        try:
            with LocalBuilder(n_workers=n, timeout=BUILD_TIMEOUT_S) as builder:
                for i, outcome in builder.build_iter(inputs):
                    if isinstance(outcome, Artifact):
                        built[items[i][0]] = load(outcome, target)
        except MeasureUnavailable:
            pass  # no worker could start: what is left is built below
    for wl, cfg in configs.items():
        if wl not in built:
            built[wl] = compile_kernel(wl, target, cfg)
    return built
