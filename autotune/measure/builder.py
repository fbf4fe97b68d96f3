"""`LocalBuilder`: a warm pool of spawned processes that build candidates, each with a timeout.

A build that overruns its timeout or kills its worker costs only that worker: it is
killed and respawned while the other workers go on with the batch. A worker killed from
outside (the OOM killer, an operator) is not the build's verdict: the input is built once
more, and a second such loss is recorded as ``ErrorKind.TRANSIENT``.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, Union

from autotune.driver import build
from autotune.measure import build_worker
from autotune.measure.result import (
    STOP_POLL_S,
    ErrorKind,
    MeasureInput,
    MeasureResult,
    MeasureUnavailable,
    ShouldStop,
    check_stop,
)
from autotune.process.child import EXTERNAL_SIGNALS, ChildDied, ChildProcess

if TYPE_CHECKING:
    from autotune.codegen.backend import Artifact

BuildFn = Callable[[Any, Any, Any], "Artifact"]
BuildOutcome = Union["Artifact", MeasureResult]

START_TIMEOUT = 60.0   # seconds for a fresh worker to import the compiler and say "ready"
MAX_START_FAILURES = 3  # consecutive start failures before the pool gives up on a batch


@dataclass
class _Slot:
    """One worker and what it is doing: 'starting', 'idle', 'busy' or 'dead'."""

    child: ChildProcess
    state: str = "dead"
    task: int = -1
    deadline: float = 0.0

    def spawn(self) -> None:
        self.child.restart()
        self.state, self.task, self.deadline = "starting", -1, time.monotonic() + START_TIMEOUT


class LocalBuilder:
    """Builds ``MeasureInput``s with ``build_fn`` in ``n_workers`` spawned processes.

    ``build_fn`` must be a picklable top-level function ``(workload, target, config) ->
    Artifact`` (``driver.build`` by default). Thread-safe: concurrent batches take turns.
    """

    def __init__(self, n_workers: int = 1, timeout: float = 10.0,
                 build_fn: BuildFn | None = None) -> None:
        if n_workers < 1 or not timeout > 0:
            raise ValueError(f"LocalBuilder: need n_workers >= 1 and timeout > 0, "
                             f"got {n_workers} and {timeout}")
        if build_fn is None:
            build_fn = build
        self.build_fn: BuildFn = build_fn
        self.timeout = timeout
        preload = (build_fn.__module__,)
        self._slots = [_Slot(ChildProcess(build_worker.serve, (preload,), f"autotune-build-{i}"))
                       for i in range(n_workers)]
        self._lock = threading.Lock()
        self._start_failures = 0
        self._start_error = ""  # why the last worker failed to start
        self._closed = False

    @property
    def n_workers(self) -> int:
        return len(self._slots)

    def build(self, inputs: Sequence[MeasureInput],
              should_stop: ShouldStop = None) -> list[BuildOutcome]:
        """An Artifact or a failed MeasureResult per input, in input order; `MeasureStopped`
        (the busy workers killed) once ``should_stop`` says so."""
        out: list[BuildOutcome | None] = [None] * len(inputs)
        for i, outcome in self.build_iter(inputs, should_stop):
            out[i] = outcome
        return out  # type: ignore[return-value]  # every index is filled exactly once

    def build_iter(self, inputs: Sequence[MeasureInput], should_stop: ShouldStop = None
                   ) -> Iterator[tuple[int, BuildOutcome]]:
        """(input index, outcome) pairs in completion order; holds the pool until exhausted
        (``should_stop`` as in `build`)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("LocalBuilder is closed")
            batch = _Batch(self, inputs, should_stop)
            try:
                yield from batch.run()
            finally:
                batch.abandon()

    def warm_up(self) -> None:
        """Start every worker now and wait until it is ready; MeasureUnavailable if none can."""
        with self._lock:
            for _ in _Batch(self, ()).run(wait_ready=True):
                pass

    def close(self) -> None:
        """Stop every worker; the builder cannot be used afterwards."""
        with self._lock:
            self._closed = True
            for slot in self._slots:
                slot.child.stop()
                slot.state = "dead"

    def __enter__(self) -> "LocalBuilder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            for slot in self._slots:
                slot.child.kill()


class _Batch:
    """One batch's dispatch loop over the builder's slots."""

    def __init__(self, builder: LocalBuilder, inputs: Sequence[MeasureInput],
                 should_stop: ShouldStop = None) -> None:
        self.b, self.inputs, self.should_stop = builder, inputs, should_stop
        self.pending = deque(range(len(inputs)))
        self.left = len(inputs)
        self.lost: dict[int, str] = {}  # inputs whose worker was killed from outside once

    def run(self, wait_ready: bool = False) -> Iterator[tuple[int, BuildOutcome]]:
        """Dispatch, collect and yield until every input has an outcome (``wait_ready``:
        also until no worker is still starting)."""
        slots = self.b._slots
        for slot in slots:
            if slot.state == "dead" and (self.left or wait_ready):
                slot.spawn()
        while self.left or (wait_ready and any(s.state == "starting" for s in slots)):
            check_stop(self.should_stop, "building the batch")
            for slot in slots:
                if slot.state == "idle" and self.pending:
                    self._dispatch(slot)
            live = [s for s in slots if s.state in ("starting", "busy")]
            if not live:
                self._give_up()
            wait_s = max(0.0, min(s.deadline for s in live) - time.monotonic())
            if self.should_stop is not None:
                wait_s = min(wait_s, STOP_POLL_S)
            ready = set(wait([s.child.conn for s in live], wait_s))  # type: ignore[misc]
            for slot in live:
                if slot.child.conn in ready:
                    yield from self._receive(slot)
                elif time.monotonic() >= slot.deadline:
                    yield from self._overdue(slot)

    def abandon(self) -> None:
        """The consumer stopped early (or the job must stop): kill the workers still busy
        with this batch's inputs, so that their late answers cannot be taken for the next
        batch's; the next batch starts their successors."""
        for slot in self.b._slots:
            if slot.state == "busy":
                slot.child.kill()
                slot.state, slot.task = "dead", -1

    def _dispatch(self, slot: _Slot) -> None:
        i = self.pending.popleft()
        inp = self.inputs[i]
        if slot.child.send((self.b.build_fn, inp.workload, inp.target, inp.config)):
            slot.state, slot.task = "busy", i
            slot.deadline = time.monotonic() + self.b.timeout
            return
        # The worker died while idle: not this input's fault, try it elsewhere.
        self.pending.appendleft(i)
        self._respawn(slot)

    def _receive(self, slot: _Slot) -> Iterator[tuple[int, BuildOutcome]]:
        try:
            msg = slot.child.recv(0.0)
        except ChildDied as died:
            if died.signal in EXTERNAL_SIGNALS and slot.state == "busy":
                yield from self._killed(slot, f"build worker killed from outside ({died})")
                return
            yield from self._lost(slot, f"build worker died ({died})", ErrorKind.COMPILE)
            return
        if msg[0] == "ready":
            slot.state = "idle"
            self.b._start_failures = 0
            return
        if msg[0] == "failed":
            self.b._start_error = msg[1]
            self._respawn(slot, start_failed=True)
            return
        i, slot.state, slot.task = slot.task, "idle", -1
        self.left -= 1
        if msg[0] == "ok":
            yield i, msg[1]
        else:
            _, kind, text, seconds = msg
            yield i, MeasureResult.failure(ErrorKind(kind), text, build_s=seconds)

    def _overdue(self, slot: _Slot) -> Iterator[tuple[int, BuildOutcome]]:
        msg = f"build exceeded {self.b.timeout:g} s"
        yield from self._lost(slot, msg, ErrorKind.BUILD_TIMEOUT)

    def _lost(self, slot: _Slot, msg: str, kind: ErrorKind) -> Iterator[tuple[int, BuildOutcome]]:
        """The worker hung or died: fail its task (if any) and replace it."""
        i, starting = slot.task, slot.state == "starting"
        if starting:
            self.b._start_error = msg
        self._respawn(slot, start_failed=starting)
        if not starting and i >= 0:
            self.left -= 1
            seconds = self.b.timeout if kind is ErrorKind.BUILD_TIMEOUT else 0.0
            yield i, MeasureResult.failure(kind, msg, build_s=seconds)

    def _killed(self, slot: _Slot, msg: str) -> Iterator[tuple[int, BuildOutcome]]:
        """The worker was killed from outside mid-build: build the input again, once."""
        i = slot.task
        if i in self.lost:
            yield from self._lost(slot, f"{msg} (and on the first attempt: {self.lost[i]})",
                                  ErrorKind.TRANSIENT)
            return
        self.lost[i] = msg
        self._respawn(slot)
        self.pending.appendleft(i)

    def _respawn(self, slot: _Slot, start_failed: bool = False) -> None:
        if start_failed:
            self.b._start_failures += 1
        if self.b._start_failures >= MAX_START_FAILURES:
            slot.child.kill()
            slot.state = "dead"
        else:
            slot.spawn()

    def _give_up(self) -> None:
        self.b._start_failures = 0  # the next batch tries again
        raise MeasureUnavailable(
            f"no build worker could be started ({self.b._start_error or 'no reason given'}). "
            "Workers are spawned processes that import the main module: a script read from "
            "stdin cannot start them, and a script needs an `if __name__ == \"__main__\":` "
            "guard")
