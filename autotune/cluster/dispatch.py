"""`Dispatcher`: one target's batches, spread over its live workers by one thread.

Every submitted batch is a `_Batch` of tasks. The dispatcher thread hands chunks of them to
idle workers, taking turns between batches (so concurrent jobs share the workers), and owns
all of this state; ``submit`` only queues a batch and waits. A chunk's results arrive as a
Ray future. When a worker is lost, its chunk's candidates go back to the front of their
batch, each alone from then on; one that was in flight on two different lost workers is
recorded as a runtime error naming both. A loss is never a config's failure otherwise.
"""
from __future__ import annotations

import itertools
import logging
import math
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from autotune.cluster.actor import Chunk
from autotune.cluster.registry import WorkerRegistry, WorkerView, error_reason
from autotune.measure.options import MeasureOptions
from autotune.measure.result import ErrorKind, MeasureInput, MeasureResult, MeasureUnavailable

log = logging.getLogger("autotune.cluster")

OnWait = Callable[[Optional[str]], None]
ShouldStop = Callable[[], bool]
PREPARE_S = 120.0  # a chunk's allowance for inputs and the numpy reference (see runner)
SLACK_S = 60.0     # and for the worker itself (imports, the first build's compiler start)
BAN_S = 60.0       # how long a worker whose own code failed gets no chunks


@dataclass(eq=False)
class _Task:
    index: int                                   # position in its batch
    lost_on: list[str] = field(default_factory=list)  # workers lost while it was in flight


@dataclass(eq=False)
class _Batch:
    inputs: Sequence[MeasureInput]
    job: Optional[int]
    pinned: bool  # measure on one worker only (re-timing compares on one device)
    pin: Optional[str] = None  # that worker (None: the first live one)
    pending: deque = field(default_factory=deque)
    results: list = field(default_factory=list)
    left: int = 0
    done: threading.Event = field(default_factory=threading.Event)
    waiting: Optional[str] = None   # why it cannot go on now (read by the submitting thread)
    error: Optional[BaseException] = None

    def __post_init__(self) -> None:
        self.pending.extend(_Task(i) for i in range(len(self.inputs)))
        self.results = [None] * len(self.inputs)
        self.left = len(self.inputs)


@dataclass
class _Flight:
    chunk: Chunk
    worker: WorkerView
    batch: _Batch
    tasks: list[_Task]
    ref: Any
    sent: float
    deadline_s: float


class Dispatcher:
    """Spreads ``target``'s batches over the registry's live workers of that target."""

    def __init__(self, registry: WorkerRegistry, target: str,
                 options: Optional[MeasureOptions] = None) -> None:
        self.registry, self.target = registry, target
        self.options = options or MeasureOptions()
        self._events: "queue.Queue[tuple[Any, ...]]" = queue.Queue()
        self._batches: list[_Batch] = []
        self._flights: dict[int, _Flight] = {}
        self._ids = itertools.count(1)
        self._turn = 0
        self._closed = False
        self._stats = {"queued": 0, "in_flight": 0, "free": 0}  # replaced whole, never mutated
        registry.on_change(lambda: self._events.put(("workers",)))
        self._thread = threading.Thread(target=self._run, name=f"autotune-dispatch {target}",
                                        daemon=True)
        self._thread.start()

    # -- the submitting side ------------------------------------------------------------

    def submit(self, inputs: Sequence[MeasureInput], *, job: Optional[int] = None,
               pinned: bool = False, pin: Optional[str] = None,
               on_wait: Optional[OnWait] = None,
               should_stop: Optional[ShouldStop] = None) -> list[MeasureResult]:
        """Measure ``inputs`` on the target's workers; results in input order. Blocks while
        no worker is alive (``on_wait`` hears the reason, then None when it goes on); a
        waiting batch is withdrawn (MeasureUnavailable) once ``should_stop`` says so.
        ``pinned``: all on one worker, ``pin`` if it lives, else the first live one."""
        if not inputs:
            return []
        if self._closed:
            raise MeasureUnavailable("the Ray executor is closed")
        batch = _Batch(inputs, job, pinned, pin)
        self._events.put(("submit", batch))
        told: Optional[str] = None
        withdrawn = False
        while not batch.done.wait(0.2):
            if batch.waiting != told and on_wait is not None:
                told = batch.waiting
                on_wait(told)
            if batch.waiting is not None and not withdrawn and should_stop is not None \
                    and should_stop():
                # A cancelled job must not wait for a worker that may never come.
                self._events.put(("withdraw", batch))
                withdrawn = True
        if told is not None and on_wait is not None:
            on_wait(None)
        if batch.error is not None:
            raise batch.error
        return batch.results

    def stats(self) -> dict[str, int]:
        """Candidates queued and in flight, and free workers, as of the last event."""
        return dict(self._stats)

    def preferred_batch(self) -> int:
        """Twice the live workers: each gets two chunks, so none idles at a batch's end."""
        return 2 * len(self.registry.live(self.target))

    def close(self) -> None:
        self._closed = True
        self._events.put(("close",))
        self._thread.join(10)

    # -- the dispatcher thread ----------------------------------------------------------

    def _run(self) -> None:
        while True:
            try:
                event = self._events.get(timeout=1.0)
            except queue.Empty:
                event = ("tick",)
            try:
                if event[0] == "close":
                    self._fail_all(MeasureUnavailable("the Ray executor was closed"))
                    return
                self._handle(event)
                self._check_workers()
                self._assign()
                self._stats = self._count()
            except Exception as err:  # a Ray call failed (head unreachable?): retry later
                log.exception("dispatcher of %s: %s", self.target, err)
                for batch in self._batches:
                    batch.waiting = f"the Ray cluster is unreachable: {error_reason(err)}"
                time.sleep(1.0)

    def _handle(self, event: tuple[Any, ...]) -> None:
        if event[0] == "submit":
            self._batches.append(event[1])
        elif event[0] == "withdraw":
            batch = event[1]
            if batch in self._batches:
                self._batches.remove(batch)
                # Chunks still in flight finish on their workers; their answers are dropped.
                batch.error = MeasureUnavailable("withdrawn: the job stopped while it waited "
                                                 "for a measurement worker")
                batch.done.set()
        elif event[0] == "done":
            _, chunk_id, value = event
            flight = self._flights.pop(chunk_id, None)
            if flight is None:
                return  # already given up on (its worker was lost): drop the late answer
            self.registry.chunk_done(flight.worker.name, chunk_id, flight.chunk.job)
            if _raised_inside(value):
                # The worker's own code failed (its runner cannot start, say): not the
                # candidates' fault. They go back unmarked and the worker sits out a while.
                self.registry.mark_dead(flight.worker.name, error_reason(value), ban_s=BAN_S)
                flight.batch.pending.extendleft(reversed(flight.tasks))
            elif isinstance(value, BaseException):
                self._lost(flight, error_reason(value))
            else:
                self._finish(flight, value)

    def _finish(self, flight: _Flight, results: Sequence[MeasureResult]) -> None:
        batch = flight.batch
        if len(results) != len(flight.tasks):
            self._lost(flight, f"answered {len(results)} results for {len(flight.tasks)}")
            return
        for task, result in zip(flight.tasks, results):
            self._settle(batch, task, result)

    def _settle(self, batch: _Batch, task: _Task, result: MeasureResult) -> None:
        if batch.done.is_set():
            return  # withdrawn
        batch.results[task.index] = result
        batch.left -= 1
        if batch.left == 0:
            self._batches.remove(batch)
            batch.done.set()

    def _lost(self, flight: _Flight, reason: str) -> None:
        """The worker failed with this chunk in flight: its candidates go back (alone), but a
        candidate lost on two different workers is recorded as a runtime error."""
        self.registry.mark_dead(flight.worker.name, reason)
        name = flight.worker.name
        for task in reversed(flight.tasks):
            if name not in task.lost_on:
                task.lost_on.append(name)
            if len(task.lost_on) >= 2:
                msg = (f"took down two measurement workers ({', '.join(task.lost_on)}); "
                       f"last: {reason}")
                self._settle(flight.batch, task, MeasureResult.failure(ErrorKind.RUNTIME, msg))
            else:
                flight.batch.pending.appendleft(task)

    def _check_workers(self) -> None:
        """Flights on workers the registry has lost are lost; overdue ones are killed."""
        import ray

        for chunk_id, flight in list(self._flights.items()):
            view = self.registry.get(flight.worker.name)
            if view is None or not view.live:
                self._flights.pop(chunk_id)
                self._lost(flight, view.reason if view else "worker lost")
            elif view.chunk == chunk_id and view.busy_s > flight.deadline_s:
                # Timed from when the worker started the chunk, not from when it was queued.
                ray.kill(view.handle, no_restart=True)
                self._flights.pop(chunk_id)
                self._lost(flight, f"chunk ran past {flight.deadline_s:g} s; worker killed")

    def _assign(self) -> None:
        """Give each idle live worker a chunk, batches taking turns."""
        live = self.registry.live(self.target)
        names = {w.name for w in live}
        for batch in self._batches:
            if batch.pinned and batch.pin not in names and live:
                batch.pin = live[0].name  # none yet, or its worker died
            batch.waiting = None if live else (
                f"waiting: no live measurement worker for target {self.target}")
        busy = {f.worker.name for f in self._flights.values()}
        for worker in live:
            if worker.name in busy:
                continue
            todo = self._next_batch(worker.name)
            if todo is None:
                return
            self._send(worker, todo, len(live))

    def _next_batch(self, worker: str) -> Optional[_Batch]:
        """The next batch in turn with work this worker may take."""
        n = len(self._batches)
        for k in range(n):
            batch = self._batches[(self._turn + k) % n]
            if batch.pending and (not batch.pinned or batch.pin == worker):
                self._turn = (self._turn + k + 1) % n
                return batch
        return None

    def _send(self, worker: WorkerView, batch: _Batch, n_live: int) -> None:
        if batch.pinned:
            size = len(batch.pending)
        else:
            size = max(1, math.ceil(len(batch.inputs) / (2 * n_live)))
        tasks = [batch.pending.popleft()]
        while len(tasks) < size and batch.pending and not tasks[0].lost_on \
                and not batch.pending[0].lost_on:
            tasks.append(batch.pending.popleft())
        first = batch.inputs[0]
        chunk = Chunk(next(self._ids), batch.job, first.workload.key, self.target,
                      tuple(int(batch.inputs[t.index].config.index) for t in tasks))
        ref = worker.handle.measure.remote(chunk)
        per = self.options.build_timeout + self.options.run_timeout + PREPARE_S
        flight = _Flight(chunk, worker, batch, tasks, ref, time.monotonic(),
                         len(tasks) * per + SLACK_S)
        self._flights[chunk.chunk_id] = flight
        ref.future().add_done_callback(lambda fut, cid=chunk.chunk_id: self._events.put(
            ("done", cid, _outcome(fut))))

    def _count(self) -> dict[str, int]:
        busy = {f.worker.name for f in self._flights.values()}
        return {"queued": sum(len(b.pending) for b in self._batches),
                "in_flight": sum(len(f.tasks) for f in self._flights.values()),
                "free": sum(w.name not in busy and w.state == "idle"
                            for w in self.registry.live(self.target))}

    def _fail_all(self, err: BaseException) -> None:
        for batch in self._batches:
            batch.error = err
            batch.done.set()
        self._batches.clear()


def _raised_inside(value: Any) -> bool:
    """Whether a chunk failed inside a live worker (not by losing it)."""
    from ray.exceptions import RayActorError, RayTaskError

    return isinstance(value, RayTaskError) and not isinstance(value, RayActorError)


def _outcome(future: Any) -> Any:
    """A finished future's value, or its exception."""
    try:
        return future.result()
    except BaseException as err:  # noqa: BLE001 - handed to the dispatcher thread
        return err
