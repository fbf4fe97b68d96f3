"""`MeasureWorker`: the long-lived measurement actor of one device (plain Python; Ray wraps it).

It builds and times with its own `LocalExecutor` on its own detected `Target`, so artifacts
are compiled for the CPU or GPU that runs them. A chunk names its candidates by workload key
and config index; the worker rebuilds them against its own space. ``status`` answers from a
second actor thread while a chunk is measured.
"""
from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from autotune.cluster.devices import Device, gpu_devices
from autotune.driver import config_space
from autotune.measure.executor import LocalExecutor
from autotune.measure.options import MeasureOptions
from autotune.measure.provenance import Provenance, stamped
from autotune.measure.result import ErrorKind, MeasureInput, MeasureResult
from autotune.ops import Workload
from autotune.target import Target, device_arch
from autotune.version import __version__


@dataclass(frozen=True)
class Chunk:
    """Candidates of one job sent to one worker: a workload key and config indices."""

    chunk_id: int
    job: Optional[int]
    workload: str
    target_key: str
    configs: tuple[int, ...]


@dataclass(frozen=True)
class SleepDevice:
    """A synthetic device: each trial takes ``seconds`` and costs a deterministic function
    of its config index; measuring a config in ``crash`` makes the worker process exit (the
    fake backend's stand-in for a kernel that takes its worker down)."""

    seconds: float
    crash: frozenset[int] = frozenset()

    def cost(self, index: int) -> float:
        return 1e-3 * (1.0 + (index * 2654435761 % 1000) / 1000.0)

    def measure(self, chunk: Chunk) -> list[MeasureResult]:
        out = []
        for index in chunk.configs:
            if index in self.crash:
                os._exit(3)
            time.sleep(self.seconds)
            cost = self.cost(index)
            out.append(MeasureResult(costs=(cost, cost * 1.01, cost * 0.99)))
        return out


class DeviceMismatch(RuntimeError):
    """The device found at start is not the one the worker advertises."""


class MeasureWorker:
    """Measures chunks on ``device`` and answers ``status`` (what it is doing now; what it
    measured is counted in the trials table, by worker id)."""

    def __init__(self, worker_id: str, device: Device, options: Optional[MeasureOptions] = None,
                 synthetic: Optional[SleepDevice] = None) -> None:
        self.worker_id, self.synthetic = worker_id, synthetic
        self._target: Optional[Target] = None
        if synthetic is None:
            self._target, device = _check_device(device)
        self.device, self.host = device, socket.gethostname()
        self.provenance = Provenance(worker_id, self.host, device.label, __version__)
        self._executor = None
        if self._target is not None:
            self._executor = LocalExecutor(self._target, options or MeasureOptions(),
                                           provenance=self.provenance)
            self._executor.warm_up()
        self._lock = threading.Lock()
        self._chunk: Optional[Chunk] = None
        self._since = 0.0
        self.started_at = time.time()

    def measure(self, chunk: Chunk) -> list[MeasureResult]:
        """Build and time ``chunk``'s candidates; results in its order, never an exception."""
        with self._lock:
            self._chunk, self._since = chunk, time.monotonic()
        try:
            return self._measure(chunk)
        finally:
            with self._lock:
                self._chunk = None

    def _measure(self, chunk: Chunk) -> list[MeasureResult]:
        if chunk.target_key != self.device.key:
            msg = f"worker {self.worker_id} measures {self.device.key}, not {chunk.target_key}"
            return [MeasureResult.failure(ErrorKind.RUNTIME, msg) for _ in chunk.configs]
        if self.synthetic is not None:
            return stamped(self.synthetic.measure(chunk), self.provenance)
        assert self._executor is not None and self._target is not None
        return self._executor.submit(_inputs(chunk, self._target))

    def status(self) -> dict[str, Any]:
        """What this worker is doing, and its counters (answered while a chunk runs)."""
        with self._lock:
            chunk = self._chunk
            return {"worker": self.worker_id, "host": self.host, "target": self.device.key,
                    "device": self.device.label, "pid": os.getpid(), "busy": chunk is not None,
                    "job": None if chunk is None else chunk.job,
                    "chunk": None if chunk is None else chunk.chunk_id,
                    "busy_s": time.monotonic() - self._since if chunk is not None else 0.0,
                    "started_at": self.started_at}

    def stop(self) -> None:
        """Stop the builder and runner processes."""
        if self._executor is not None:
            self._executor.close()


def _inputs(chunk: Chunk, target: Target) -> Sequence[MeasureInput]:
    """The chunk's candidates as MeasureInputs of this worker's own target."""
    workload = Workload.from_json(chunk.workload)
    sp = config_space(workload, target)
    return [MeasureInput(workload, target, sp.get(i)) for i in chunk.configs]


def _check_device(device: Device) -> tuple[Target, Device]:
    """This process's target and device; DeviceMismatch when not what ``device`` advertises."""
    if device.gpu is not None:
        device = _assigned_gpu(device)
    target = Target(device.spec)
    if target.key != device.key:
        raise DeviceMismatch(f"this worker advertises {device.key!r} but its device is "
                             f"{target.key!r}: start `autotune worker` on the host it describes")
    return target, device


def _assigned_gpu(device: Device) -> Device:
    """The GPU Ray gave this actor (CUDA_VISIBLE_DEVICES), which must be of the advertised
    target."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    mine = [d for d in gpu_devices() if str(d.gpu) in visible or d.uuid in visible]
    want = device_arch(Target(device.spec).arch)  # sm_90 and sm_90a run on one GPU
    for found in mine:
        if device_arch(Target(found.spec).arch) == want:
            return replace(found, spec=device.spec, key=device.key)
    names = ", ".join(f"{d.name} ({d.key})" for d in mine) or "none"
    raise DeviceMismatch(f"this worker advertises {device.key!r} but the GPU assigned to it "
                         f"(CUDA_VISIBLE_DEVICES={','.join(visible)!r}) is {names}")
