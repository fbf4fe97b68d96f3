"""`FeatureWorkers`: spawned processes that lower configs and extract feature rows beside the
calling process, so that a large batch of new rows uses every core.

A batch is cut into chunks that shrink towards its end (the last ones decide when it ends).
The caller and each worker that has finished starting take chunks from the front, a worker
two in flight at a time. A worker still starting, dead, hung or failing never loses or
changes a row: its chunks go back to the caller, which computes them itself (and raises
what the worker hit, if it is a bug). Rows are the same bytes either way: the same code
lowers the same config, and each chunk comes back finished (``features.finish_rows``).
"""
from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import numpy as np

from autotune.costmodel.features import extract_raw, finish_rows
from autotune.costmodel.nest import summarize
from autotune.driver import InvalidConfig, config_space, lower
from autotune.ir.stmt import PrimFunc
from autotune.process.child import ChildDied, ChildProcess, ChildTimeout, child_setup, tasks

log = logging.getLogger(__name__)

LocalFn = Callable[[list[int]], np.ndarray]  # config indices -> their rows, by the caller

CHUNK = 16  # configs per message: ~5-8 ms of work, against ~0.1 ms of pipe round trip
MIN_CHUNK = 4  # the shortest chunk at the end of a batch
MIN_BATCH = 48  # smaller batches are done by the caller alone (not worth the round trips)
MAX_AUTO = 3  # workers when asked for "auto": large batches rarely have more chunks to share
HANG_S = 60.0  # a chunk unanswered this long means a hung worker (one takes ~10 ms)
MAX_DEATHS = 3  # after this many lost workers, the caller works alone


def auto_workers() -> int:
    """One worker per core beyond the caller's, at most ``MAX_AUTO``."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(0, min(cores - 1, MAX_AUTO))


def lowered_rows(indices: Sequence[int], lower_one: Callable[[int], PrimFunc | None],
                 stats: dict[str, Any] | None = None) -> np.ndarray:
    """Finished "ast" rows of configs ``indices``; ``lower_one(index)`` lowers one (None when
    it fails to lower: an all-NaN row). ``stats`` gains the seconds spent lowering
    (``lower_s``) and extracting (``extract_s``)."""
    raws = []
    lower_s = extract_s = 0.0
    for i in indices:
        t0 = time.perf_counter()
        func = lower_one(i)
        t1 = time.perf_counter()
        raws.append(None if func is None else extract_raw(summarize(func)))
        lower_s += t1 - t0
        extract_s += time.perf_counter() - t1
    t0 = time.perf_counter()
    rows = finish_rows(raws)
    if stats is not None:
        stats["lower_s"] += lower_s
        stats["extract_s"] += extract_s + time.perf_counter() - t0
    return rows


def chunk_rows(workload: Any, target: Any, indices: Sequence[int]) -> np.ndarray:
    """``lowered_rows`` of configs ``indices``, lowered with ``driver.lower`` (a worker's)."""
    sp = config_space(workload, target)

    def lower_one(index: int) -> PrimFunc | None:
        try:
            return lower(workload, target, sp.get(index))
        except InvalidConfig:
            return None

    return lowered_rows(indices, lower_one)


def cut(n: int, size: int, parties: int) -> list[slice]:
    """Chunks of ``n`` items for ``parties`` processes (guided scheduling): each about half a
    party's share of what is left, between ``MIN_CHUNK`` and ``size``, so that the last
    chunks, which one party may still be on when the others are done, are short."""
    out: list[slice] = []
    start = 0
    while start < n:
        k = max(min(size, -(-(n - start) // (2 * parties))), min(MIN_CHUNK, size))
        out.append(slice(start, min(n, start + k)))
        start += k
    return out


def _worker_main(conn: Connection) -> None:
    child_setup()

    for key, workload, target, indices in tasks(conn):
        try:
            rows = chunk_rows(workload, target, indices)
        except Exception as exc:  # the caller redoes the chunk and sees the real error
            conn.send(("error", key, f"{type(exc).__name__}: {exc}"))
        else:
            conn.send(("rows", key, rows))


class _Worker:
    """One child and the chunks it holds."""

    def __init__(self, name: str) -> None:
        self.child = ChildProcess(_worker_main, (), name)
        self.ready = False
        self.held: deque[tuple[int, int]] = deque()  # (batch, chunk) keys
        self.since = 0.0  # when its oldest held chunk was sent

    @property
    def conn(self) -> Connection | None:
        return self.child.conn


def _kill_all(workers: list[_Worker]) -> None:
    for w in workers:
        w.child.kill()
    workers.clear()


class FeatureWorkers:
    """``n`` worker processes (started at the first large batch) that share batches of
    feature rows with the caller. Thread-safe: concurrent batches take turns."""

    def __init__(self, n: int, *, chunk: int = CHUNK, min_batch: int = MIN_BATCH) -> None:
        if n < 0 or chunk < 1:
            raise ValueError(f"FeatureWorkers: need n >= 0 and chunk >= 1; got {n}, {chunk}")
        self.n, self.chunk, self.min_batch = n, chunk, min_batch
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        # an owner that forgets close() does not leave processes behind once collected
        weakref.finalize(self, _kill_all, self._workers)
        self.deaths = 0
        self._batch = 0  # tags chunks, so a late answer from an abandoned batch is ignored
        self._config_s = 5e-4  # the caller's time per config in its last chunk
        self.stats = {"batches": 0, "by_workers": 0}

    @property
    def pids(self) -> list[int]:
        return [pid for w in self._workers if (pid := w.child.pid) is not None]

    def start(self, wait: bool = False) -> None:
        """Spawn the workers now; they start in the background (batches do not wait for
        them) unless ``wait``: then return once each is ready or has failed to start."""
        with self._lock:
            self._start()
            deadline = time.monotonic() + HANG_S
            while wait and time.monotonic() < deadline and any(
                    w.child.started and not w.ready for w in self._workers):
                self._collect({}, deque(), 0.1)

    def _start(self) -> None:
        if self.deaths >= MAX_DEATHS:
            return
        while len(self._workers) < self.n:
            self._workers.append(_Worker(f"autotune-features-{len(self._workers)}"))
        for w in self._workers:
            if not w.child.started:  # new, or lost (``_lost`` has reset it)
                w.child.start()

    def close(self) -> None:
        """Stop the workers (a later large batch starts them again)."""
        with self._lock:
            for w in self._workers:
                if w.held:  # it may be blocked sending answers nobody will read
                    w.child.kill()
                else:
                    w.child.stop()
            self._workers.clear()

    def rows(self, workload: Any, target: Any, indices: Sequence[int], local: LocalFn
             ) -> np.ndarray:
        """Rows of ``indices`` in order; ``local(chunk)`` computes a chunk's rows here."""
        if self.n == 0 or len(indices) < self.min_batch:
            return local(list(indices))
        with self._lock:
            self._start()
            self._batch += 1
            parties = 1 + sum(w.child.started for w in self._workers)
            chunks = [list(indices[s]) for s in cut(len(indices), self.chunk, parties)]
            done: dict[int, np.ndarray] = {}
            todo = deque(range(len(chunks)))
            while len(done) < len(chunks):
                self._collect(done, todo, 0.0)
                self._feed(workload, target, chunks, todo, done)
                k = todo.popleft() if todo else self._steal(chunks, done)
                if k is not None:
                    t0 = time.perf_counter()
                    done[k] = local(chunks[k])
                    # per config: chunks differ in length
                    self._config_s = (time.perf_counter() - t0) / len(chunks[k])
                else:  # every chunk left is being computed by a worker
                    self._collect(done, todo, self._config_s * self.chunk)
                    self._reap_hung(todo, done)
            self.stats["batches"] += 1
            return np.concatenate([done[k] for k in range(len(chunks))])

    def _steal(self, chunks: list[list[int]], done: dict[int, np.ndarray]) -> int | None:
        """A chunk of this batch a worker holds but has not answered, to redo here: its
        last one sent (likely not started), or the one it is on when that has taken over
        twice what the caller needs for it. None: wait for the workers."""
        now = time.monotonic()
        for w in self._workers:
            mine = [k for b, k in w.held if b == self._batch and k not in done]
            late = bool(mine) and now - w.since > 2 * self._config_s * len(chunks[mine[0]])
            if len(mine) >= 2 or late:
                return mine[-1]
        return None

    def _feed(self, workload: Any, target: Any, chunks: list[list[int]], todo: deque[int],
              done: dict[int, np.ndarray]) -> None:
        """Give every ready worker up to two chunks from the front of ``todo``."""
        for w in self._workers:
            while w.ready and len(w.held) < 2 and todo:
                k = todo.popleft()
                if not w.child.send(((self._batch, k), workload, target, chunks[k])):
                    todo.appendleft(k)
                    self._lost(w, todo, done, "its pipe is closed")
                    break
                if not w.held:
                    w.since = time.monotonic()
                w.held.append((self._batch, k))

    def _collect(self, done: dict[int, np.ndarray], todo: deque[int], timeout: float) -> None:
        """Take every message that has arrived (waiting up to ``timeout`` for the first)."""
        conns = {w.conn: w for w in self._workers if w.conn is not None}
        for conn in wait(list(conns), timeout) if conns else ():
            w = conns[conn]  # type: ignore[index]
            while w.conn is not None:
                try:
                    msg = w.child.recv(0.0)
                except ChildTimeout:
                    break
                except ChildDied as exc:
                    self._lost(w, todo, done, str(exc))
                    break
                self._handle(w, msg, done, todo)

    def _handle(self, w: _Worker, msg: Any, done: dict[int, np.ndarray], todo: deque[int]
                ) -> None:
        kind = msg[0]
        if kind == "ready":
            w.ready = True
            return
        key = msg[1]
        if key in w.held:
            w.held.remove(key)
            w.since = time.monotonic()
        batch, k = key
        if batch != self._batch or k in done:
            return  # the caller took the chunk back, or an earlier batch left it
        if kind == "rows":
            done[k] = msg[2]
            self.stats["by_workers"] += len(msg[2])
        else:  # "error": the caller redoes the chunk
            log.debug("feature worker: %s; redoing chunk here", msg[2])
            todo.append(k)

    def _reap_hung(self, todo: deque[int], done: dict[int, np.ndarray]) -> None:
        now = time.monotonic()
        for w in self._workers:
            if w.held and now - w.since > HANG_S:
                self._lost(w, todo, done, f"no answer in {HANG_S:g} s")

    def _lost(self, w: _Worker, todo: deque[int], done: dict[int, np.ndarray], why: str
              ) -> None:
        """Take back ``w``'s chunks of this batch that are not done yet and drop the process
        (the next batch starts another)."""
        todo.extend(k for b, k in w.held if b == self._batch and k not in done)
        w.held.clear()
        w.ready = False
        w.child.kill()
        self.deaths += 1
        if self.deaths >= MAX_DEATHS:
            log.warning("feature workers: lost %d (last: %s); lowering in this process only",
                        self.deaths, why)
        else:
            log.warning("feature worker lost (%s); its chunks are redone here", why)
