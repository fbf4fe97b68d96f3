"""Whether this host can build, run and time code for a target (the service asks at submit).

A target the host cannot run would record every config as failed, and configs are measured
once ever: those records would poison the database. CPU targets: LLVM must know the CPU and
features, the host CPU must have every ISA extension the code would use (probed, see
`autotune.target.isa`), and ``-cores`` must not exceed the host's. CUDA: nvcc and a GPU of the
target's arch (`host_gpus`, which Ray workers list their GPUs with too).
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from typing import Optional

from autotune.target import CUDA_ARCHS, Target, device_arch, host_cores, host_cpu
from autotune.target.isa import probe, probe_trusted


def measure_refusal(target: Target, *, ray_address: Optional[str]) -> Optional[str]:
    """Why a job for ``target`` must be refused before anything is recorded (one line naming
    the target), or None: the one check of `autotune.tune`, the CLI and the service's submit.
    On a Ray cluster (``ray_address``) the workers of the target's key measure, not this
    host."""
    if ray_address:
        return None
    reason = why_not_measurable(target)
    return f"this host cannot measure {target.key}: {reason}" if reason else None


def why_not_measurable(target: Target) -> Optional[str]:
    """Why this host cannot measure ``target`` (one sentence), or None when it can."""
    if target.kind == "cuda":
        return _cuda_reason(target.arch)
    return _cpu_reason(target)


def _cpu_reason(target: Target) -> Optional[str]:
    host_name, host_features = host_cpu()
    if target.mcpu == host_name and target.features == host_features:
        found = probe_trusted(host_name, host_features)
    else:
        found = probe(target.mcpu, target.features)
    if found.error:
        return found.error
    missing = sorted(found.isa - probe_trusted(host_name, host_features).isa)
    if missing:
        return f"this host's CPU ({host_name}) lacks {', '.join(missing)}, which its code uses"
    if target.cores > host_cores():
        return f"-cores={target.cores}, but this host has {host_cores()} cores to time on"
    return None


@dataclass(frozen=True)
class HostGpu:
    """One CUDA GPU of this host."""

    index: int
    name: str
    uuid: str
    arch: str  # e.g. "sm_90"


def host_gpus() -> list[HostGpu]:
    """This host's CUDA GPUs of a supported arch, as ``nvidia-smi`` lists them (none
    without it); the service process never opens a GPU context to find them."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index,name,uuid,compute_cap",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4 or not parts[0].isdigit():
            continue
        index, name, uuid, cap = parts
        arch = "sm_" + cap.replace(".", "")
        if arch in CUDA_ARCHS:
            found.append(HostGpu(int(index), name, uuid, arch))
    return found


def _cuda_reason(arch: str) -> Optional[str]:
    from autotune.codegen.cuda.nvcc import find_nvcc

    if find_nvcc() is None:
        return "this host has no nvcc (PATH, $CUDA_HOME, /usr/local/cuda) to compile CUDA"
    archs = sorted({gpu.arch for gpu in host_gpus()})
    if not archs:
        return "this host has no CUDA GPU (nvidia-smi lists none of a supported arch)"
    if device_arch(arch) not in archs:
        return f"this host's GPUs are {', '.join(archs)}, not {arch}"
    return None
