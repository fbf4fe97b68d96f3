"""The devices a host can measure on, and the Ray resources that advertise them.

A CPU host offers one device, its CPU (`Target("llvm")`); each CUDA GPU that `nvidia-smi`
lists with a supported compute capability is one more (`Target("cuda -arch=sm_XY")`).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Optional

from autotune.target import CUDA_ARCHS, Target

RESOURCE_PREFIX = "autotune-target-"


@dataclass(frozen=True)
class Device:
    """One measuring device of a host: its target spec and key, name, and GPU index/uuid."""

    spec: str          # what `Target(spec)` is built from on the worker's host
    key: str           # the target key jobs name
    name: str          # CPU model or GPU product name
    gpu: Optional[int] = None   # CUDA device index (None for the CPU)
    uuid: str = ""     # GPU uuid

    @property
    def kind(self) -> str:
        return "cuda" if self.gpu is not None else "llvm"

    @property
    def label(self) -> str:
        """Short device text for listings: the name, and the uuid of a GPU."""
        return f"{self.name} ({self.uuid})" if self.uuid else self.name


def resource_name(target_key: str) -> str:
    """The Ray custom resource advertising ``target_key`` (keys hold spaces and '=', so a
    digest names it; the registry maps actors back to full keys)."""
    return RESOURCE_PREFIX + hashlib.sha1(target_key.encode()).hexdigest()[:16]


def cpu_device() -> Device:
    """This host's CPU as a device."""
    from autotune.measure.provenance import cpu_model

    target = Target("llvm")
    return Device("llvm", target.key, cpu_model())


def gpu_devices() -> list[Device]:
    """Each CUDA GPU of this host with a supported arch (none without ``nvidia-smi``), as
    the target that uses it fully: a Hopper GPU (sm_90) as ``sm_90a``, the default CUDA
    target (a worker started with ``--target "cuda -arch=sm_90"`` measures wmma's)."""
    from autotune.measure.capability import host_gpus

    out = []
    for gpu in host_gpus():
        arch = gpu.arch + "a" if gpu.arch + "a" in CUDA_ARCHS else gpu.arch
        spec = f"cuda -arch={arch}"
        out.append(Device(spec, Target(spec).key, gpu.name, gpu.index, gpu.uuid))
    return out


def host_devices(cpu: bool = True, gpus: bool = True) -> list[Device]:
    """The devices of this host to measure on."""
    return ([cpu_device()] if cpu else []) + (gpu_devices() if gpus else [])
