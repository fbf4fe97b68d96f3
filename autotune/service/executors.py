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
    Optional,
    Sequence,
)

from autotune.job_options import MeasureOverrides
from autotune.measure.executor import Executor, holding

if TYPE_CHECKING:
    from autotune.measure.result import MeasureInput, MeasureResult, ShouldStop
    from autotune.target import Target

# Makes a target's executor, measuring with the settings' options overridden by a job's.
ExecutorFactory = Callable[["Target", MeasureOverrides], object]

log = logging.getLogger("autotune.service")


def pool_key(target: "Target", measure_options: Optional[MeasureOverrides] = None) -> str:
    """The key of ``target``'s executor measuring with ``measure_options``."""
    given = measure_options.given() if measure_options is not None else {}
    if not given:
        return target.key
    return f"{target.key} {json.dumps(given, sort_keys=True)}"


def device_of(target: "Target") -> str:
    """The device a target times on: the host for CPU targets, else the target itself."""
    return "host" if target.kind == "llvm" else target.key


class _Holder:
    """Which job holds a device lock now (None: none), shared by an executor and the views
    jobs take of it, for the Workers page."""

    job: Optional[int] = None


class LockedExecutor(Executor):
    """An executor whose ``submit`` holds its device's lock (shared between executors);
    ``host_work`` too when that device is the host (see `autotune.search.loop`). A job
    uses it through `for_job`: its batches stop with the job (``should_stop``, waiting
    for the lock included), and while it holds the lock, `job` names it."""

    def __init__(self, inner: object, lock: threading.Lock, *, on_host: bool,
                 should_stop: "ShouldStop" = None, job_id: Optional[int] = None,
                 holder: Optional[_Holder] = None) -> None:
        self.inner, self.lock, self.on_host = inner, lock, on_host
        self.should_stop, self.job_id = should_stop, job_id
        self._holder = holder if holder is not None else _Holder()

    @property
    def job(self) -> Optional[int]:
        """The job holding the lock through this executor or a view of it now, if any."""
        return self._holder.job

    @contextmanager
    def _held(self) -> Iterator[None]:
        with holding(self.lock, self.should_stop):
            self._holder.job = self.job_id
            try:
                yield
            finally:
                self._holder.job = None

    def submit(self, inputs: Sequence["MeasureInput"]) -> list["MeasureResult"]:
        with self._held():
            return list(self.inner.submit(inputs))  # type: ignore[attr-defined]

    def for_job(self, *, job_id: int, on_wait: Optional[Callable[[Optional[str]], None]] = None,
                should_stop: "ShouldStop" = None) -> Executor:
        """The job's view of the inner executor (whose batches stop with the job), behind
        the same lock."""
        # The factory may make any object that submits (tests' stand-ins have no for_job).
        view = getattr(self.inner, "for_job", None)
        inner = self.inner if view is None else view(job_id=job_id, on_wait=on_wait,
                                                     should_stop=should_stop)
        return LockedExecutor(inner, self.lock, on_host=self.on_host, should_stop=should_stop,
                              job_id=job_id, holder=self._holder)

    def host_work(self) -> ContextManager[Any]:
        """Held by a job while it computes on the host: keeps other jobs' CPU timing out."""
        return self._held() if self.on_host else nullcontext()

    def close(self) -> None:
        """A no-op: the pool owns the inner executor (jobs must not close it)."""


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

    def get(self, target: "Target", measure_options: Optional[MeasureOverrides] = None) -> Any:
        """The shared executor of ``target`` and ``measure_options`` (made on first use)."""
        return self._get(target, measure_options, hold=False)

    def _get(self, target: "Target", measure_options: Optional[MeasureOverrides], *,
             hold: bool) -> Any:
        lock = self.device_lock(target)  # one per device, whatever the options
        key = pool_key(target, measure_options)
        with self._lock:
            found = self._executors.get(key)
            if found is None:
                made = self._factory(target, measure_options or MeasureOverrides())
                found = LockedExecutor(made, lock, on_host=device_of(target) == "host") \
                    if self.locked else made
                self._executors[key] = found
            self._last_used[key] = time.monotonic()
            if hold:  # in the same critical section: no eviction in between
                self._users[key] = self._users.get(key, 0) + 1
            return found

    @contextmanager
    def use(self, target: "Target",
            measure_options: Optional[MeasureOverrides] = None) -> Iterator[Any]:
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
