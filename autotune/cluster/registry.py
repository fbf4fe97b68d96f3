"""`WorkerRegistry`: the measurement actors of a Ray cluster, found by name, and their status.

A refresh thread lists the named actors of autotune's namespace every ``refresh_s``, asks
each for its status (answered from a thread of its own while it measures), and marks a
worker dead when its actor is gone. Dispatchers read ``live(target)`` and are woken when the
set of live workers changes; the service shows ``snapshot()``. A status answer is read up to
``refresh_s`` after it was given, so the dispatchers also report each chunk that comes back
(`chunk_done`): a worker is shown idle once its last chunk is back, and an answer older than
that does not make it busy again.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from autotune.cluster import ACTOR_PREFIX, NAMESPACE

log = logging.getLogger("autotune.cluster")

STATUS_TIMEOUT_S = 30.0  # a worker silent this long (status unanswered) counts as dead
KEEP_DEAD = 100          # dead workers still listed (most recent first)
FINISHED_KEPT = 32       # finished chunks remembered per worker (see WorkerView.finished)


@dataclass
class WorkerView:
    """One measurement actor as this process sees it."""

    name: str
    handle: Any
    target: str = ""
    host: str = ""
    device: str = ""
    pid: int = 0
    state: str = "starting"  # starting (no status yet), idle, busy, dead
    job: Optional[int] = None
    chunk: Optional[int] = None
    busy_s: float = 0.0
    last_seen: float = 0.0   # wall-clock time of its last status
    reason: str = ""         # why it is dead
    pending: Any = None      # the outstanding status call
    asked_at: float = field(default=0.0)
    # (chunk, job) of the chunks this process saw it finish: a status answered before then
    # but read after says it is still busy with one of them, which is no longer true
    finished: deque = field(default_factory=lambda: deque(maxlen=FINISHED_KEPT))

    @property
    def live(self) -> bool:
        return self.state in ("idle", "busy")

    def public(self) -> dict[str, Any]:
        return {"name": self.name, "worker": self.name[len(ACTOR_PREFIX):], "host": self.host,
                "target": self.target, "device": self.device, "state": self.state,
                "job": self.job, "last_seen": self.last_seen or None,
                "reason": self.reason or None}

    def idle(self) -> None:
        self.state, self.job, self.chunk, self.busy_s = "idle", None, None, 0.0


def connect(address: Optional[str]) -> None:
    """Join the Ray cluster at ``address`` as a driver (idempotent within a process)."""
    import ray

    if not ray.is_initialized():
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
                 configure_logging=False)


class WorkerRegistry:
    """The cluster's measurement workers; ``start`` connects and begins refreshing."""

    def __init__(self, address: Optional[str], *, refresh_s: float = 1.0) -> None:
        self.address, self.refresh_s = address, refresh_s
        self._lock = threading.Lock()
        self._workers: dict[str, WorkerView] = {}
        self._dead: list[WorkerView] = []
        self._listeners: list[Callable[[], None]] = []
        self._banned: dict[str, float] = {}  # name -> monotonic time it may come back
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.error = ""  # why the last refresh failed ("" when it worked)

    def start(self) -> "WorkerRegistry":
        connect(self.address)
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="autotune-ray-registry",
                                        daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (from the refresh thread) whenever workers come or go."""
        with self._lock:
            self._listeners.append(listener)

    def wait_live(self, target: str, n: int = 1, timeout: float = 30.0) -> int:
        """Refresh until ``target`` has ``n`` live workers or ``timeout`` passes; how many."""
        deadline = time.monotonic() + timeout
        while True:
            self.refresh()
            found = len(self.live(target))
            if found >= n or time.monotonic() >= deadline:
                return found
            time.sleep(0.1)

    def live(self, target: str) -> list[WorkerView]:
        """The live workers of ``target``, in a stable order."""
        with self._lock:
            return sorted((w for w in self._workers.values() if w.live and w.target == target),
                          key=lambda w: w.name)

    def get(self, name: str) -> Optional[WorkerView]:
        with self._lock:
            return self._workers.get(name)

    def snapshot(self) -> list[dict[str, Any]]:
        """Every known worker, live first, then the most recently dead."""
        with self._lock:
            views = sorted(self._workers.values(), key=lambda w: (w.target, w.name))
            return [w.public() for w in views] + [w.public() for w in self._dead]

    def track(self, name: str, handle: Any) -> WorkerView:
        """Start tracking the actor ``name`` (state ``starting`` until its first status)."""
        view = WorkerView(name, handle)
        with self._lock:
            self._workers[name] = view
        return view

    def chunk_done(self, name: str, chunk: int, job: Optional[int]) -> None:
        """A chunk this process sent to worker ``name`` came back: the worker is idle now,
        unless its status has since named another chunk (the dispatcher calls this before
        it hands the results on, so a job never ends with its worker shown busy on it)."""
        with self._lock:
            view = self._workers.get(name)
            if view is None:
                return
            view.finished.append((chunk, job))
            if view.state == "busy" and view.chunk == chunk:
                view.idle()

    def mark_dead(self, name: str, reason: str, *, ban_s: float = 0.0) -> None:
        """Forget a worker whose actor failed; a later refresh re-adds it if it answers, after
        ``ban_s`` seconds."""
        with self._lock:
            if ban_s > 0:
                self._banned[name] = time.monotonic() + ban_s
            view = self._workers.pop(name, None)
            if view is None:
                return
            view.state, view.reason, view.pending = "dead", reason, None
            self._dead.insert(0, view)
            del self._dead[KEEP_DEAD:]
        log.warning("measurement worker %s lost: %s", name, reason)
        self._notify()

    # -- refreshing ---------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.refresh()
                self.error = ""
            except Exception as err:  # the cluster may be unreachable for a while
                self.error = f"{type(err).__name__}: {err}"
                log.warning("cannot refresh the Ray workers: %s", self.error)

    def refresh(self) -> None:
        """List the actors, collect answered status calls and ask again."""
        import ray

        # all namespaces: the caller may have joined Ray under a namespace of its own
        names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if a["namespace"] == NAMESPACE and a["name"].startswith(ACTOR_PREFIX)}
        changed = False
        with self._lock:
            known = dict(self._workers)
        now = time.monotonic()
        for name in names - known.keys():
            if self._banned.get(name, 0.0) > now:
                continue
            self._banned.pop(name, None)
            try:
                handle = ray.get_actor(name, namespace=NAMESPACE)
            except ValueError:  # gone between the listing and now
                continue
            self.track(name, handle)
        for name in known.keys() - names:
            self.mark_dead(name, "its actor is gone")
        with self._lock:
            views = list(self._workers.values())
        for view in views:
            if view.pending is not None:
                ready, _ = ray.wait([view.pending], timeout=0)
                if ready:
                    changed |= self._take_status(view, ready[0])
                elif now - view.asked_at > STATUS_TIMEOUT_S:
                    self.mark_dead(view.name, f"no status answer in {STATUS_TIMEOUT_S:g} s")
                    continue
            if view.pending is None and view.state != "dead":
                view.pending = view.handle.status.options(concurrency_group="status").remote()
                view.asked_at = now
        if changed:
            self._notify()

    def _take_status(self, view: WorkerView, ref: Any) -> bool:
        """Apply an answered status call; whether the worker became live."""
        import ray

        view.pending = None
        try:
            status = ray.get(ref)
        except Exception as err:  # the actor died (or never started)
            self.mark_dead(view.name, error_reason(err))
            return False
        return self.apply_status(view, status)

    def apply_status(self, view: WorkerView, status: dict[str, Any]) -> bool:
        """Take a worker's answer to ``status`` (`MeasureWorker.status`); whether it
        became live."""
        was_live = view.live
        with self._lock:
            view.target, view.host = status["target"], status["host"]
            view.device, view.pid = status["device"], status["pid"]
            view.last_seen = time.time()
            if status["busy"] and (status["chunk"], status["job"]) not in view.finished:
                view.state, view.job, view.chunk = "busy", status["job"], status["chunk"]
                view.busy_s = status["busy_s"]
            else:  # idle, or busy with a chunk known to have finished since it answered
                view.idle()
        return not was_live

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener()


def error_reason(err: BaseException) -> str:
    """One line saying why an actor call failed."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}".strip()
