"""Server-sent events of one job: its trials batch by batch, the best so far, state changes.

Event ``id`` is the id of the newest trial sent, so a client reconnecting with
``Last-Event-ID`` (or ``?after=``) gets only what it has not seen. Events:

- ``state``: ``{"state", "error", "trials_done", "budget", "best_gflops", "waiting"}`` on
  connect and on every change (``waiting``: why a claimed job is queued, else null);
- ``batch``: ``{"trials": [...], "trials_done", "budget", "best": {...} | null}`` per measured
  batch (a reconnect's backlog comes in chunks of at most ``CHUNK`` trials); ``best`` is the
  fastest first measurement of the job's trials so far, what the curve plots; the job's
  best (`Database.best`'s ranking, re-timing included) is the state's ``best_gflops``;
- ``end``: the job has ended and every trial was sent; the stream then closes. Which process
  runs the job does not matter: everything is read from the database.

A stream closes after ``lifetime_s`` whatever the job does (a comment line says so); clients
reconnect with ``Last-Event-ID`` (browsers' EventSource does). `StreamLimits` caps the streams
open at once, in all and per client address.

Streams of one job read through the service's `ResponseCache`: the job row, and the trials
after a given id, are read once per change however many streams follow the job (each wakes
on the same notice, and all but the first find the read made or in flight). Before a stream
ends it reads the last trials itself, so that a row cached before the last batch never hides
it.
"""
from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from typing import Any, AsyncIterator, Optional

from anyio import to_thread

from autotune.db import TERMINAL_STATES, Database, JobRecord, TrialRecord
from autotune.service.cache import ResponseCache
from autotune.service.manager import JobManager
from autotune.service.schemas import trial_fields

CHUNK = 500
POLL_S = 1.0        # re-read the database at least this often
HEARTBEAT_S = 15.0  # a comment line keeps proxies from closing an idle stream


class StreamsFull(Exception):
    """No event stream may open now; the message says which cap was reached."""


class StreamSlot:
    """One open stream's place in `StreamLimits`; `release` is idempotent."""

    def __init__(self, limits: "StreamLimits", client: str) -> None:
        self._limits, self.client, self._held = limits, client, True

    def release(self) -> None:
        self._limits._release(self)


class StreamLimits:
    """Caps on the event streams open at once: ``total`` in all, ``per_client`` per address."""

    def __init__(self, total: int, per_client: int) -> None:
        self.total, self.per_client = total, per_client
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def open(self, client: str) -> StreamSlot:
        """A slot for one more stream from ``client``; StreamsFull saying which cap is reached."""
        with self._lock:
            if sum(self._open.values()) >= self.total:
                raise StreamsFull(f"the service has {self.total} event streams open, its "
                                  "limit (AUTOTUNE_MAX_EVENT_STREAMS); retry later")
            if self._open[client] >= self.per_client:
                raise StreamsFull(f"{self.per_client} event streams of this client are open, "
                                  "the limit per client (AUTOTUNE_MAX_EVENT_STREAMS_PER_CLIENT)"
                                  "; close one first")
            self._open[client] += 1
        return StreamSlot(self, client)

    def _release(self, slot: StreamSlot) -> None:
        # Under the lock: the stream's end and its background task may both release it.
        with self._lock:
            if not slot._held:
                return
            slot._held = False
            self._open[slot.client] -= 1
            if self._open[slot.client] <= 0:
                del self._open[slot.client]


def format_event(event: str, data: Any, event_id: Optional[int] = None) -> str:
    """One SSE message."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _slim(trial: TrialRecord) -> dict[str, Any]:
    fields = trial_fields(trial)
    del fields["costs"], fields["job_id"]
    return fields


def _state(job: JobRecord) -> dict[str, Any]:
    return {"state": job.state, "error": job.error, "trials_done": job.trials_done,
            "budget": job.trials, "best_gflops": job.best_gflops, "waiting": job.waiting}


class _Best:
    def __init__(self) -> None:
        self.value: Optional[dict[str, Any]] = None

    def offer(self, trial: TrialRecord) -> None:
        if trial.gflops is not None and (self.value is None or trial.gflops > self.value["gflops"]):
            self.value = {"gflops": trial.gflops, "cost": trial.cost, "id": trial.id,
                          "config": trial.config}


def _run(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a worker thread (awaitable)."""
    return to_thread.run_sync(lambda: fn(*args, **kwargs))


class _Reads:
    """A job's stream's reads of the database, off the event loop; those every stream of
    the job makes are shared through the response cache (one read for all streams)."""

    def __init__(self, db: Database, cache: ResponseCache, job_id: int) -> None:
        self.db, self.cache, self.job_id = db, cache, job_id

    async def _shared(self, key: tuple[Any, ...], fn: Any, *args: Any) -> Any:
        return await self.cache.fetch(("events", self.job_id, *key), lambda: fn(*args))

    async def job(self) -> Optional[JobRecord]:
        return await self._shared(("job",), self.db.get_job, self.job_id)

    async def trials_since(self, after: int, *, fresh: bool) -> list[TrialRecord]:
        """Trials after row ``after``; ``fresh``: read now, not shared (a shared read may
        predate the job's end)."""
        if fresh:
            return await _run(self.db.job_trials_since, self.job_id, after, CHUNK)
        return await self._shared(("since", after), self.db.job_trials_since, self.job_id,
                                  after, CHUNK)

    async def count(self, after: int) -> int:
        return await self._shared(("count", after), self.db.job_trial_count, self.job_id)

    async def best_sent(self, after: int) -> _Best:
        """The best of the trials up to row ``after``, which a resumed stream sent before."""
        best = _Best()
        if after > 0:
            page, _ = await _run(self.db.job_trials, self.job_id, limit=1, sort="-gflops")
            if page and page[0].id <= after:
                best.offer(page[0])
        return best


def _batch(trials: list[TrialRecord], best: _Best, done: int, budget: int, after: int) -> str:
    """The event of a batch of new trials (``best`` takes them in)."""
    for trial in trials:
        best.offer(trial)
    return format_event("batch", {"trials": [_slim(t) for t in trials], "trials_done": done,
                                  "budget": budget, "best": best.value}, after)


async def job_events(db: Database, manager: JobManager, cache: ResponseCache, job_id: int,
                     after: int = 0, *, lifetime_s: float = math.inf) -> AsyncIterator[str]:
    """The event stream of ``job_id``, starting after trial row ``after``, for at most
    ``lifetime_s`` seconds."""
    deadline = time.monotonic() + lifetime_s
    reads = _Reads(db, cache, job_id)
    best = await reads.best_sent(after)
    sent_state: Optional[dict[str, Any]] = None
    idle = 0.0
    yield "retry: 2000\n\n"
    with manager.notifier.subscribe(job_id) as sub:
        while True:
            sub.clear()
            job = await reads.job()
            if job is None:
                return
            # Whether the job is done must be read before the trials: then no trial of its
            # last batch can be missed when we end the stream below. The process running it
            # (this one or another) clears the owner only after its last batch is recorded,
            # and the trials are then read afresh (a shared read may predate the job's).
            finished = job.state in TERMINAL_STATES and job.owner is None
            trials = await reads.trials_since(after, fresh=finished)
            if trials:
                after = trials[-1].id or after  # (a database row has an id)
                done = await reads.count(after)
                yield _batch(trials, best, max(done, job.trials_done), job.trials, after)
                idle = 0.0
            state = _state(job)
            if state != sent_state:
                yield format_event("state", state, after or None)
                sent_state, idle = state, 0.0
            if len(trials) == CHUNK:
                continue  # more backlog: send it before waiting
            if finished:
                yield format_event("end", {"state": job.state}, after or None)
                return
            if manager.notifier.closed:
                return
            left = deadline - time.monotonic()
            if left <= 0:  # bounded even for a job that never starts: the client reconnects
                yield ": stream lifetime reached; reconnect with Last-Event-ID\n\n"
                return
            if not await sub.wait(min(POLL_S, left)):
                idle += POLL_S
                if idle >= HEARTBEAT_S:
                    yield ": keep-alive\n\n"
                    idle = 0.0
