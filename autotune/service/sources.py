"""Generated code of recorded configs, made on demand and cached (configs never change).

``loop``: the scheduled loop AST. ``llvm``: the generated source, i.e. what ``driver.build``
returns as ``source`` without its costly half: the LLVM IR text before O3 and object code on
CPU targets, the CUDA C before nvcc on GPU targets. Neither touches a device, so no device
lock is taken. Sources are made in a small pool of threads of their own (never the request
thread pool, so /health and other routes keep answering), at the lowest CPU priority (a
kernel timed meanwhile keeps the cores), each (workload, target, config, form) once however
many requests ask for it at once; a request waits at most ``timeout_s`` and then answers
with an error while the source is still made and cached for the next request.
"""
from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

if TYPE_CHECKING:
    from autotune.ops import Workload
    from autotune.target import Target

Key = tuple[str, str, int, str]
MakeFn = Callable[["Workload", "Target", Mapping[str, Any], str], str]


@dataclass(frozen=True)
class SourceResult:
    """A config's source, or why there is none (``error``)."""

    text: Optional[str] = None
    error: Optional[str] = None


def make_source(workload: "Workload", target: "Target", config: Mapping[str, Any],
                form: str) -> str:
    """The ``form`` source of ``config`` (its ``{"index", "knobs"}`` dict); raises on failure."""
    from autotune import driver

    if form == "loop":
        return str(driver.lower(workload, target, dict(config)))
    return driver.source(workload, target, dict(config))


def _lowest_priority() -> None:
    # Linux schedules threads as tasks: nice 19 for this thread only (elsewhere the call
    # would renice the whole process, so leave it).
    if sys.platform.startswith("linux"):
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError:
            pass


class SourceCache:
    """An LRU of ``(workload key, target key, config index, form) -> SourceResult``, filled by
    ``workers`` threads; at most ``max_pending`` distinct sources are queued at a time."""

    def __init__(self, *, size: int = 256, workers: int = 1, timeout_s: float = 10.0,
                 max_pending: int = 64, make: MakeFn = make_source) -> None:
        self.size, self.timeout_s, self.max_pending = size, timeout_s, max_pending
        self._make = make
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="autotune-source",
                                        initializer=_lowest_priority)
        self._lock = threading.Lock()
        self._done: "OrderedDict[Key, SourceResult]" = OrderedDict()
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
                self._done.move_to_end(key)
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
            self._done[key] = result
            while len(self._done) > self.size:
                self._done.popitem(last=False)
            self._pending.pop(key, None)
            self.made += 1
        return result

    def stats(self) -> dict[str, int]:
        """Sources cached, being made, made so far, and requests that timed out."""
        with self._lock:
            return {"cached": len(self._done), "pending": len(self._pending),
                    "made": self.made, "timeouts": self.timeouts}

    def close(self) -> None:
        """Stop the threads; queued sources are dropped, one being made is left to finish."""
        self._pool.shutdown(wait=False, cancel_futures=True)
