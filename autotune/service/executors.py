"""One shared measurement executor per target and set of job measure options, serialised
per device across jobs.

All CPU ("llvm") targets share the host's cores, so they share one device lock: nothing
else of ours builds or times while a kernel is timed, and a job's search and model updates
(which use every core) hold it too, so they never run beside another job's timing. Each
CUDA arch is its own device, timed by the GPU's own clock: searching on the host beside
it is fine.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import contextmanager, nullcontext
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    ContextManager,
    Iterator,
    Mapping,
    Optional,
    Sequence,
)

from autotune.measure.executor import Executor

if TYPE_CHECKING:
    from autotune.measure.result import MeasureInput, MeasureResult
    from autotune.target import Target

# Makes a target's executor, measuring with the settings' options overridden by the mapping
# (a job's `measure_options`).
ExecutorFactory = Callable[["Target", Mapping[str, Any]], object]

log = logging.getLogger("autotune.service")


def pool_key(target: "Target", measure_options: Optional[Mapping[str, Any]] = None) -> str:
    """The key of ``target``'s executor measuring with ``measure_options``."""
    if not measure_options:
        return target.key
    return f"{target.key} {json.dumps(measure_options, sort_keys=True)}"


def device_of(target: "Target") -> str:
    """The device a target times on: the host for CPU targets, else the target itself."""
    return "host" if target.kind == "llvm" else target.key


class LockedExecutor(Executor):
    """An executor whose ``submit`` holds its device's lock (shared between executors);
    ``host_work`` too when that device is the host (see `autotune.search.loop`)."""

    def __init__(self, inner: object, lock: threading.Lock, *, on_host: bool) -> None:
        self.inner, self.lock, self.on_host = inner, lock, on_host
        self.job: Optional[int] = None  # the job holding the lock through it now, if any

    def submit(self, inputs: Sequence["MeasureInput"]) -> list["MeasureResult"]:
        with self.lock:
            return list(self.inner.submit(inputs))  # type: ignore[attr-defined]

    def host_work(self) -> ContextManager[Any]:
        """Held by a job while it computes on the host: keeps other jobs' CPU timing out."""
        return self.lock if self.on_host else nullcontext()

    def for_job(self, *, job_id: int, on_wait: Optional[Callable[[Optional[str]], None]] = None,
                should_stop: Optional[Callable[[], bool]] = None) -> Executor:
        """This executor as ``job_id`` uses it: while it holds the lock, `job` names it."""
        return _JobUse(self, job_id)

    @contextmanager
    def held_by(self, job_id: int) -> Iterator[None]:
        """The device lock, held for ``job_id`` (the Workers view shows it busy with it)."""
        with self.lock:
            self.job = job_id
            try:
                yield
            finally:
                self.job = None

    def close(self) -> None:
        """A no-op: the pool owns the inner executor (jobs must not close it)."""


class _JobUse(Executor):
    """A `LockedExecutor` as one job uses it."""

    def __init__(self, shared: LockedExecutor, job_id: int) -> None:
        self.shared, self.job_id = shared, job_id

    @property
    def inner(self) -> object:
        """The executor the pool shares (`LockedExecutor.inner`)."""
        return self.shared.inner

    def submit(self, inputs: Sequence["MeasureInput"]) -> list["MeasureResult"]:
        with self.shared.held_by(self.job_id):
            return list(self.shared.inner.submit(inputs))  # type: ignore[attr-defined]

    def host_work(self) -> ContextManager[Any]:
        return self.shared.held_by(self.job_id) if self.shared.on_host else nullcontext()

    def close(self) -> None:
        """A no-op, as `LockedExecutor.close`."""
        return None


class ExecutorPool:
    """Lazily made executors keyed by target and measurement options (`pool_key`); ``close``
    stops them all.

    ``locked=False`` for executors that share their devices between jobs themselves (the
    Ray executor): they are handed out as made, not behind a device lock. With ``idle_s``,
    `evict_idle` closes the executors (their build pool and runner processes) that no job has
    used for that long: each distinct target would otherwise keep its processes for good.
    """

    def __init__(self, factory: ExecutorFactory, *, locked: bool = True,
                 idle_s: Optional[float] = None) -> None:
        self._factory, self.locked, self.idle_s = factory, locked, idle_s
        self._lock = threading.Lock()
        self._executors: dict[str, Any] = {}
        self._users: dict[str, int] = {}        # jobs using each executor now (see `use`)
        self._last_used: dict[str, float] = {}  # monotonic time each was last let go of
        self._device_locks: dict[str, threading.Lock] = {}

    def device_lock(self, target: "Target") -> threading.Lock:
        """The lock held while ``target``'s device measures."""
        with self._lock:
            return self._device_locks.setdefault(device_of(target), threading.Lock())

    def get(self, target: "Target", measure_options: Optional[Mapping[str, Any]] = None) -> Any:
        """The shared executor of ``target`` and ``measure_options`` (made on first use)."""
        return self._get(target, measure_options, hold=False)

    def _get(self, target: "Target", measure_options: Optional[Mapping[str, Any]], *,
             hold: bool) -> Any:
        lock = self.device_lock(target)  # one per device, whatever the options
        key = pool_key(target, measure_options)
        with self._lock:
            found = self._executors.get(key)
            if found is None:
                made = self._factory(target, measure_options or {})
                found = LockedExecutor(made, lock, on_host=device_of(target) == "host") \
                    if self.locked else made
                self._executors[key] = found
            self._last_used[key] = time.monotonic()
            if hold:  # in the same critical section: no eviction in between
                self._users[key] = self._users.get(key, 0) + 1
            return found

    @contextmanager
    def use(self, target: "Target",
            measure_options: Optional[Mapping[str, Any]] = None) -> Iterator[Any]:
        """The executor of ``target`` and ``measure_options``, never evicted while in use (a
        job holds it)."""
        key = pool_key(target, measure_options)
        executor = self._get(target, measure_options, hold=True)
        try:
            yield executor
        finally:
            with self._lock:
                self._users[key] -= 1
                self._last_used[key] = time.monotonic()

    def executors(self) -> dict[str, Any]:
        """The executors open now, by `pool_key`."""
        with self._lock:
            return dict(self._executors)

    def evict_idle(self, now: Optional[float] = None) -> list[str]:
        """Close the executors unused for ``idle_s``; returns their `pool_key`s."""
        if self.idle_s is None:
            return []
        now = time.monotonic() if now is None else now
        with self._lock:
            idle = [key for key in self._executors if not self._users.get(key)
                    and now - self._last_used.get(key, now) >= self.idle_s]
            gone = [self._executors.pop(key) for key in idle]
        for key, ex in zip(idle, gone):
            log.info("closing the executor of %s: idle for %.0f s", key, self.idle_s)
            _close(ex)
        return idle

    def close(self) -> None:
        """Stop every executor's processes."""
        with self._lock:
            executors, self._executors = list(self._executors.values()), {}
        for ex in executors:
            _close(ex)


def _close(executor: Any) -> None:
    """Close the executor a pool made (a LockedExecutor's inner one)."""
    close = getattr(getattr(executor, "inner", executor), "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:  # one executor's failure to stop must not keep the others running
        log.exception("closing an executor failed")
