"""`ResponseCache`: ready-to-send JSON bodies of the read endpoints (a job, its pages, the
lists, `/best`), and the rows that many event streams of one job read at once.

An entry is served while no job has changed since it was made (the notifier's version: a
submit, cancel, claim, batch or release of this service) and for at most ``ttl`` seconds
(writes by other processes, e.g. `autotune tune` on the same database, show up after that).
Concurrent misses of one key share one read, so fifty clients cost one query per change,
and a hit is served on the event loop without a thread.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, Awaitable, Callable, Hashable, Optional, Union

from anyio import to_thread
from fastapi.encoders import jsonable_encoder
from fastapi.responses import Response

from autotune.lru import LRU


class ResponseCache:
    """An LRU of ``key -> (version, made at, value)``; thread-safe."""

    def __init__(self, version: Callable[[], int], *, ttl: float = 1.0, size: int = 512) -> None:
        self._version, self.ttl, self.size = version, ttl, size
        self._lock = threading.Lock()
        self._items: LRU[Hashable, tuple[int, float, Any]] = LRU(size)
        self._pending: dict[Hashable, "asyncio.Future[Any]"] = {}  # event-loop thread only

    def get(self, key: Hashable) -> Optional[Any]:
        """The cached body, or None when missing or stale."""
        with self._lock:
            entry = self._items.get(key)
            if entry is None:
                return None
            version, made, body = entry
            if version != self._version() or time.monotonic() - made > self.ttl:
                self._items.pop(key)
                return None
            return body

    def put(self, key: Hashable, version: int, body: Any) -> None:
        """Store ``body`` as of ``version`` (read the version *before* querying)."""
        with self._lock:
            self._items.put(key, (version, time.monotonic(), body))

    def version(self) -> int:
        return self._version()

    async def fetch(self, key: Hashable,
                    make: Union[Callable[[], Any], Callable[[], Awaitable[Any]]]) -> Any:
        """The cached body, or ``make()`` (awaited if it is a coroutine function, else run in a
        thread) and cached. Concurrent misses of one key share one ``make`` (after a batch
        lands, fifty clients cost one query, not fifty)."""
        found = self.get(key)
        if found is not None:
            return found
        pending = self._pending.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: "asyncio.Future[Any]" = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            version = self.version()
            if asyncio.iscoroutinefunction(make):
                body = await make()
            else:
                body = await to_thread.run_sync(make)  # type: ignore[arg-type]
            self.put(key, version, body)
            future.set_result(body)
            return body
        except BaseException as err:
            future.set_exception(err)
            future.exception()  # retrieved: no "never retrieved" warning without waiters
            raise
        finally:
            del self._pending[key]


async def cached_json(cache: ResponseCache, key: Hashable, make: Callable[[], Any]) -> Response:
    """The JSON response of ``make()`` (a model or plain data, read in a worker thread),
    from ``cache`` under ``key`` (an HTTPException it raises is not cached)."""
    return json_response(await cache.fetch(key, lambda: json_body(make())))


def json_body(value: Any) -> bytes:
    """Compact JSON bytes of a pydantic model or plain data."""
    return json.dumps(jsonable_encoder(value), separators=(",", ":")).encode()


def json_response(body: bytes, status_code: int = 200) -> Response:
    return Response(content=body, status_code=status_code, media_type="application/json")
