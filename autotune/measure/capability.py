"""Whether this host can build, run and time code for a target (the service asks at submit).

A target the host cannot run would record every config as failed, and configs are measured
once ever: those records would poison the database. CPU targets: LLVM must know the CPU and
features, the host CPU must have every ISA extension the code would use (probed, see
`autotune.target_isa`), and ``-cores`` must not exceed the host's. CUDA: nvcc and a GPU of the
target's arch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from autotune.target import Target


def why_not_measurable(target: "Target") -> Optional[str]:
    """Why this host cannot measure ``target`` (one sentence), or None when it can."""
    if target.kind == "cuda":
        return _cuda_reason(target.arch)
    return _cpu_reason(target)


def _cpu_reason(target: "Target") -> Optional[str]:
    from autotune.target import host_cores, host_cpu
    from autotune.target_isa import probe, probe_trusted

    host_name, host_features = host_cpu()
    if target.mcpu == host_name and target.features == host_features:
        found = probe_trusted(host_name, host_features)
    else:
        found = probe(target.mcpu, target.features)
    if found.error:
        return found.error
    missing = sorted(found.isa - probe_trusted(host_name, host_features).isa)
    if missing:
        return (f"this host's CPU ({host_name}) lacks {', '.join(missing)}, which code for "
                f"'{target.key}' uses")
    if target.cores > host_cores():
        return f"-cores={target.cores}, but this host has {host_cores()} cores to time on"
    return None


def _cuda_reason(arch: str) -> Optional[str]:
    from autotune.codegen.cuda_nvcc import find_nvcc

    if find_nvcc() is None:
        return "this host has no nvcc (PATH, $CUDA_HOME, /usr/local/cuda) to compile CUDA"
    try:
        import pycuda.driver as cuda

        cuda.init()  # no context: the service process never holds the GPU
        archs = [f"sm_{major}{minor}" for major, minor in
                 (cuda.Device(i).compute_capability() for i in range(cuda.Device.count()))]
    except Exception as err:  # ImportError, no driver: no GPU to time on
        return f"this host has no CUDA GPU ({type(err).__name__}: {err})"
    if not archs:
        return "this host has no CUDA GPU"
    if archs[0] != arch:
        return f"this host's GPU is {archs[0]}, not {arch}"
    return None
