"""`Provenance`: who measured a trial (worker, host, device, autotune version).

Every result carries it in ``extra["measured_by"]``; the database keeps the worker id in
its own column, so a job's trials can be grouped by the worker that timed them.
"""
from __future__ import annotations

import dataclasses
import functools
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from autotune.target import host_cpu
from autotune.version import __version__

if TYPE_CHECKING:
    from autotune.measure.result import MeasureResult
    from autotune.target import Target


@dataclass(frozen=True)
class Provenance:
    """Where a measurement happened."""

    worker: str   # a stable id of the measuring process, e.g. "local:host" or a Ray actor name
    host: str
    device: str   # CPU model, or GPU name and uuid
    version: str  # autotune's version

    def as_extra(self) -> dict[str, str]:
        return dataclasses.asdict(self)


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """This machine's CPU model name (from /proc/cpuinfo; LLVM's name where that is missing)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fp:
            for line in fp:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass

    return host_cpu()[0]


def device_name(target: "Target") -> str:
    """What a target times on here: the CPU model, or the CUDA arch (GPU workers say more)."""
    return cpu_model() if target.kind == "llvm" else f"CUDA {target.arch}"


def local_provenance(target: "Target", worker: str = "") -> Provenance:
    """The provenance of measurements made by this process on ``target``."""
    host = socket.gethostname()
    return Provenance(worker or f"local:{host}", host, device_name(target), __version__)


def stamped(results: Sequence["MeasureResult"], who: Provenance) -> list["MeasureResult"]:
    """``results`` with ``extra["measured_by"]`` set to ``who``."""
    mark: dict[str, Any] = {"measured_by": who.as_extra()}
    return [dataclasses.replace(r, extra={**r.extra, **mark}) for r in results]
