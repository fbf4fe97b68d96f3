"""One shared measurement executor per target, serialised per device across jobs.

All CPU ("llvm") targets share the host's cores, so they share one device lock: nothing
else of ours builds or times while a kernel is timed. Each CUDA arch is its own device.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Callable, Sequence

if TYPE_CHECKING:
    from autotune.measure.result import MeasureInput, MeasureResult
    from autotune.target import Target

ExecutorFactory = Callable[["Target"], object]


def device_of(target: "Target") -> str:
    """The device a target times on: the host for CPU targets, else the target itself."""
    return "host" if target.kind == "llvm" else target.key


class LockedExecutor:
    """An executor whose ``submit`` holds its device's lock (shared between executors)."""

    def __init__(self, inner: object, lock: threading.Lock) -> None:
        self.inner, self.lock = inner, lock

    def submit(self, inputs: Sequence["MeasureInput"]) -> list["MeasureResult"]:
        with self.lock:
            return list(self.inner.submit(inputs))  # type: ignore[attr-defined]

    def close(self) -> None:
        """A no-op: the pool owns the inner executor (jobs must not close it)."""


class ExecutorPool:
    """Lazily made executors keyed by target; ``close`` stops them all."""

    def __init__(self, factory: ExecutorFactory) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._executors: dict[str, LockedExecutor] = {}
        self._device_locks: dict[str, threading.Lock] = {}

    def device_lock(self, target: "Target") -> threading.Lock:
        """The lock held while ``target``'s device measures (also for builds in the service)."""
        with self._lock:
            return self._device_locks.setdefault(device_of(target), threading.Lock())

    def get(self, target: "Target") -> LockedExecutor:
        """The shared executor of ``target`` (made on first use)."""
        lock = self.device_lock(target)
        with self._lock:
            found = self._executors.get(target.key)
            if found is None:
                found = LockedExecutor(self._factory(target), lock)
                self._executors[target.key] = found
            return found

    def close(self) -> None:
        """Stop every executor's processes."""
        with self._lock:
            executors, self._executors = list(self._executors.values()), {}
        for ex in executors:
            close = getattr(ex.inner, "close", None)
            if close is not None:
                close()
