"""One shared measurement executor per target, serialised per device across jobs.

All CPU ("llvm") targets share the host's cores, so they share one device lock: nothing
else of ours builds or times while a kernel is timed, and a job's search and model updates
(which use every core) hold it too, so they never run beside another job's timing. Each
CUDA arch is its own device, timed by the GPU's own clock: searching on the host beside
it is fine.
"""
from __future__ import annotations

import threading
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Sequence

if TYPE_CHECKING:
    from autotune.measure.result import MeasureInput, MeasureResult
    from autotune.target import Target

ExecutorFactory = Callable[["Target"], object]


def device_of(target: "Target") -> str:
    """The device a target times on: the host for CPU targets, else the target itself."""
    return "host" if target.kind == "llvm" else target.key


class LockedExecutor:
    """An executor whose ``submit`` holds its device's lock (shared between executors);
    ``host_work`` too when that device is the host (see `autotune.search.loop`)."""

    def __init__(self, inner: object, lock: threading.Lock, *, on_host: bool) -> None:
        self.inner, self.lock, self.on_host = inner, lock, on_host

    def submit(self, inputs: Sequence["MeasureInput"]) -> list["MeasureResult"]:
        with self.lock:
            return list(self.inner.submit(inputs))  # type: ignore[attr-defined]

    def host_work(self) -> ContextManager[Any]:
        """Held by a job while it computes on the host: keeps other jobs' CPU timing out."""
        return self.lock if self.on_host else nullcontext()

    def close(self) -> None:
        """A no-op: the pool owns the inner executor (jobs must not close it)."""


class ExecutorPool:
    """Lazily made executors keyed by target; ``close`` stops them all.

    ``locked=False`` for executors that share their devices between jobs themselves (the
    Ray executor): they are handed out as made, not behind a device lock."""

    def __init__(self, factory: ExecutorFactory, *, locked: bool = True) -> None:
        self._factory, self.locked = factory, locked
        self._lock = threading.Lock()
        self._executors: dict[str, Any] = {}
        self._device_locks: dict[str, threading.Lock] = {}

    def device_lock(self, target: "Target") -> threading.Lock:
        """The lock held while ``target``'s device measures (also for builds in the service)."""
        with self._lock:
            return self._device_locks.setdefault(device_of(target), threading.Lock())

    def get(self, target: "Target") -> Any:
        """The shared executor of ``target`` (made on first use)."""
        lock = self.device_lock(target)
        with self._lock:
            found = self._executors.get(target.key)
            if found is None:
                made = self._factory(target)
                found = LockedExecutor(made, lock, on_host=device_of(target) == "host") \
                    if self.locked else made
                self._executors[target.key] = found
            return found

    def executors(self) -> dict[str, Any]:
        """The executors made so far, by target key."""
        with self._lock:
            return dict(self._executors)

    def close(self) -> None:
        """Stop every executor's processes."""
        with self._lock:
            executors, self._executors = list(self._executors.values()), {}
        for ex in executors:
            close = getattr(getattr(ex, "inner", ex), "close", None)
            if close is not None:
                close()
