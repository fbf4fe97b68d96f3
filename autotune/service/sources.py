"""Generated code of recorded configs, made on demand and cached (configs never change).

Forms: ``loop``, the scheduled loop AST, and the generated source (LLVM IR or CUDA C; see
`autotune.service.source_worker`). Neither touches a device, so no device lock is taken. Sources are
made by worker processes at the lowest CPU priority (`SourceWorkers`): making one is seconds
of pure Python, which in a thread here would hold the interpreter lock away from the event
loop, and /health would wait behind it. Each (workload, target, config, form) is made once
however many requests ask for it at once; a request waits at most ``timeout_s`` and then
answers with an error while the source is still made and cached for the next request.
"""
from __future__ import annotations

import asyncio
import queue
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from autotune.lru import LRU
from autotune.process.child import ChildDied, ChildProcess, ChildTimeout

if TYPE_CHECKING:
    from autotune.ops import Workload
    from autotune.target import Target

Key = tuple[str, str, int, str]
MakeFn = Callable[["Workload", "Target", Mapping[str, Any], str], str]
_START_S = 60.0  # a worker's interpreter start and imports, on a loaded host


@dataclass(frozen=True)
class SourceResult:
    """A config's source, or why there is none (``error``)."""

    text: Optional[str] = None
    error: Optional[str] = None


class SourceError(Exception):
    """The worker could not make the source (the message says why)."""


class SourceWorkers:
    """``n`` warm worker processes making sources (`autotune.service.source_worker`), started on
    first use; one that overruns ``limit_s`` or dies is replaced. Called from many threads."""

    def __init__(self, n: int = 1, *, limit_s: float = 120.0) -> None:
        from autotune.service import source_worker

        self.limit_s = limit_s
        self._idle: "queue.SimpleQueue[ChildProcess]" = queue.SimpleQueue()
        self._all = [ChildProcess(source_worker.serve, (), f"autotune-source-{i}")
                     for i in range(n)]
        for child in self._all:
            self._idle.put(child)
        self._closed = False

    def __call__(self, workload: "Workload", target: "Target", config: Mapping[str, Any],
                 form: str) -> str:
        """The source, made by an idle worker; raises SourceError."""
        child = self._idle.get()
        try:
            return self._make(child, (workload, target, dict(config), form))
        finally:
            self._idle.put(child)

    def _make(self, child: ChildProcess, task: tuple[Any, ...]) -> str:
        if self._closed:
            raise SourceError("the service is shutting down")
        try:
            if not child.started:
                child.start()
                child.recv(_START_S)  # ("ready", pid)
            if not child.send(task):
                raise ChildDied(*child.exit_status())
            status, payload = child.recv(self.limit_s)
        except ChildTimeout:
            child.kill()  # it may be stuck: the next task starts a fresh one
            raise SourceError(f"the source took over {self.limit_s:g} s and was abandoned")
        except ChildDied as err:
            child.kill()
            raise SourceError(f"the source worker died ({err})") from None
        if status != "ok":
            raise SourceError(payload)
        return payload

    def close(self) -> None:
        """Stop every worker (a source being made is abandoned)."""
        self._closed = True
        for child in self._all:
            child.kill()


class SourceCache:
    """An LRU of ``(workload key, target key, config index, form) -> SourceResult``, filled by
    ``workers`` worker processes (or ``make`` called in as many threads); at most
    ``max_pending`` distinct sources are queued at a time."""

    def __init__(self, *, size: int = 256, workers: int = 1, timeout_s: float = 10.0,
                 max_pending: int = 64, make: Optional[MakeFn] = None) -> None:
        self.size, self.timeout_s, self.max_pending = size, timeout_s, max_pending
        self._workers: Optional[SourceWorkers] = None
        if make is None:
            self._workers = make = SourceWorkers(workers)
        self._make = make
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="autotune-source")
        self._lock = threading.Lock()
        self._done: LRU[Key, SourceResult] = LRU(size)
        self._pending: dict[Key, Future] = {}
        self.made = 0      # sources made (or failed) so far
        self.timeouts = 0  # requests answered before their source was ready

    async def get(self, workload: "Workload", target: "Target", config: Mapping[str, Any],
                  form: str) -> SourceResult:
        """The ``form`` source of ``config``, made once and cached; never raises."""
        key = (workload.key, target.key, int(config["index"]), form)
        with self._lock:
            found = self._done.get(key)
            if found is not None:
                return found
            future = self._pending.get(key)
            if future is None:
                if len(self._pending) >= self.max_pending:
                    return SourceResult(error=f"busy: {len(self._pending)} sources are being "
                                              "generated; retry later")
                future = self._pool.submit(self._make_one, key, workload, target,
                                           dict(config), form)
                self._pending[key] = future
        try:
            # shield: a request that gives up must not cancel what others wait for
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)),
                                          self.timeout_s)
        except asyncio.TimeoutError:
            with self._lock:
                self.timeouts += 1
            return SourceResult(error=f"timed out: the source took over {self.timeout_s:g} s; "
                                      "it is still being generated, retry later")
        except asyncio.CancelledError:
            if not future.cancelled():
                raise  # this request was cancelled, not the source
            return SourceResult(error="the service is shutting down")

    def _make_one(self, key: Key, workload: "Workload", target: "Target",
                  config: Mapping[str, Any], form: str) -> SourceResult:
        try:
            result = SourceResult(text=self._make(workload, target, config, form))
        except Exception as err:  # a config from an older space, a codegen failure...
            result = SourceResult(error=f"{type(err).__name__}: {err}")
        with self._lock:
            # Cached before the future completes: a request never finds neither.
            self._done.put(key, result)
            self._pending.pop(key, None)
            self.made += 1
        return result

    def stats(self) -> dict[str, int]:
        """Sources cached, being made, made so far, and requests that timed out."""
        with self._lock:
            return {"cached": len(self._done), "pending": len(self._pending),
                    "made": self.made, "timeouts": self.timeouts}

    def close(self) -> None:
        """Stop the threads and workers; queued sources are dropped."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._workers is not None:
            self._workers.close()
