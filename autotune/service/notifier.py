"""`Notifier`: wakes event streams (asyncio) when a job changes in a worker thread.

The database stays the source of truth; a notice only says "look again now", so a lost one
costs at most a poll interval.
"""
from __future__ import annotations

import asyncio
import threading
from typing import Optional

ALL_JOBS = -1  # subscribe to every job's notices


class Subscription:
    """One stream's wake-up flag for one job (or ALL_JOBS)."""

    def __init__(self, notifier: "Notifier", job_id: int) -> None:
        self._notifier, self.job_id = notifier, job_id
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def _wake(self) -> None:
        # Called from any thread.
        try:
            self._loop.call_soon_threadsafe(self._event.set)
        except RuntimeError:  # loop closed: the stream is gone
            pass

    def clear(self) -> None:
        """Forget notices so far (call before reading the database)."""
        self._event.clear()

    async def wait(self, timeout: float) -> bool:
        """True when a notice arrived within ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    def close(self) -> None:
        self._notifier._remove(self)

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Notifier:
    """Thread-safe fan-out of "job N changed" to the subscribed streams."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: dict[int, set[Subscription]] = {}
        self.closed = False
        self.version = 0  # bumped by every notice: caches of job data compare it

    def subscribe(self, job_id: int = ALL_JOBS) -> Subscription:
        """A subscription (call from the event loop's thread)."""
        sub = Subscription(self, job_id)
        with self._lock:
            self._subs.setdefault(job_id, set()).add(sub)
        return sub

    def publish(self, job_id: Optional[int] = None) -> None:
        """Wake the streams of ``job_id`` (and the all-jobs ones); None wakes everyone."""
        with self._lock:
            self.version += 1
            if job_id is None:
                targets = [s for subs in self._subs.values() for s in subs]
            else:
                targets = [*self._subs.get(job_id, ()), *self._subs.get(ALL_JOBS, ())]
        for sub in targets:
            sub._wake()

    def close(self) -> None:
        """Mark closed and wake every stream so that it can end."""
        self.closed = True
        self.publish(None)

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            subs = self._subs.get(sub.job_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[sub.job_id]
