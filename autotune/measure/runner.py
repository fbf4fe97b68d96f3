"""`LocalRunner`: one spawned process that owns the device and times artifacts one by one.

A kernel that kills the process (a segfault) or hangs costs only that process: it is
replaced and the batch goes on. A runner lost to something outside the kernel (SIGKILL by
the OOM killer or an operator, SIGTERM, a timeout while preparing inputs, death while
idle) is not the config's verdict: the candidate is tried once more on a fresh runner, and
a second such loss is recorded as ``ErrorKind.TRANSIENT``. A lock makes one runner safe to
share between threads.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from autotune.driver import load
from autotune.measure import run_worker
from autotune.measure.options import MeasureOptions
from autotune.measure.result import (
    STOP_POLL_S,
    ErrorKind,
    MeasureInput,
    MeasureResult,
    MeasureStopped,
    MeasureUnavailable,
    ShouldStop,
    check_stop,
)
from autotune.measure.run_worker import LoadFn
from autotune.process.child import EXTERNAL_SIGNALS, ChildDied, ChildProcess, ChildTimeout

if TYPE_CHECKING:
    from autotune.codegen.backend import Artifact
    from autotune.target import Target

START_TIMEOUT = 60.0    # seconds for a fresh runner to import and say "ready"
PREPARE_TIMEOUT = 120.0  # seconds for a workload's inputs and numpy reference (not timed)

@dataclasses.dataclass(frozen=True)
class _Lost:
    """An attempt lost to something outside the candidate (the runner was replaced)."""

    reason: str


class LocalRunner:
    """Times artifacts on ``target`` in a spawned process, following ``options``.

    ``load_fn(artifact, target) -> kernel`` must be a picklable top-level function
    (``driver.load`` by default); tests inject fake kernels through it.
    """

    def __init__(self, target: "Target", options: MeasureOptions | None = None,
                 load_fn: LoadFn | None = None) -> None:
        if load_fn is None:
            load_fn = load
        options = options or MeasureOptions()
        self.target, self.options = target, options
        self._child = ChildProcess(run_worker.serve, (target, load_fn), "autotune-runner")
        self._ready = False
        self._lock = threading.Lock()  # the device: one batch at a time
        self._closed = False

    @property
    def pid(self) -> int | None:
        """The runner process's id (None before the first run)."""
        return self._child.pid

    def run(self, items: Sequence[tuple[MeasureInput, "Artifact"]],
            should_stop: ShouldStop = None) -> list[MeasureResult]:
        """Measure each (input, artifact) in order; failures are results, never exceptions.
        Once ``should_stop`` says so, the runner process is killed (`MeasureStopped`)."""
        return list(self.run_iter(items, should_stop))

    def run_iter(self, items: Iterable[tuple[MeasureInput, "Artifact"]],
                 should_stop: ShouldStop = None) -> Iterator[MeasureResult]:
        """Like ``run`` but lazy: ``items`` may still be arriving (builds in flight). The
        device stays locked until the iterator is exhausted or closed."""
        with self._lock:
            if self._closed:
                raise RuntimeError("LocalRunner is closed")
            for inp, artifact in items:
                check_stop(should_stop, "timing the batch")
                t0 = time.perf_counter()
                result = self._run_one(inp, artifact, should_stop)
                yield dataclasses.replace(result, run_s=time.perf_counter() - t0)

    def warm_up(self) -> None:
        """Start the runner process now rather than at the first candidate."""
        with self._lock:
            self._ensure_ready()

    def close(self) -> None:
        """Stop the runner process; the runner cannot be used afterwards."""
        with self._lock:
            self._closed = True
            self._child.stop()
            self._ready = False

    def __enter__(self) -> "LocalRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self._child.kill()

    # -- one candidate -------------------------------------------------------------------

    def _run_one(self, inp: MeasureInput, artifact: "Artifact",
                 should_stop: ShouldStop = None) -> MeasureResult:
        """One candidate, tried a second time when the first attempt was lost (`_Lost`)."""
        first = self._attempt(inp, artifact, should_stop)
        if not isinstance(first, _Lost):
            return first
        second = self._attempt(inp, artifact, should_stop)
        if not isinstance(second, _Lost):
            return dataclasses.replace(second, extra={**second.extra, "retried": first.reason})
        return MeasureResult.failure(ErrorKind.TRANSIENT, f"{second.reason} (and on the first "
                                     f"attempt: {first.reason})")

    def _attempt(self, inp: MeasureInput, artifact: "Artifact",
                 should_stop: ShouldStop = None) -> MeasureResult | _Lost:
        """One try: the candidate's result, or `_Lost` when the runner was lost to
        something outside the candidate (it has been replaced then)."""
        self._ensure_ready()
        if not self._child.send((artifact, inp.workload, self.options)):
            return self._lose(f"runner process died before the task ({self._exit()})")
        started = False
        try:
            msg = self._recv(PREPARE_TIMEOUT, should_stop)
            if msg[0] == "started":
                started = True
                msg = self._recv(self.options.run_timeout, should_stop)
        except ChildTimeout:
            if started:
                return self._replace(ErrorKind.RUN_TIMEOUT, f"run exceeded "
                                     f"{self.options.run_timeout:g} s; runner killed")
            return self._lose(f"preparing inputs and reference exceeded "
                              f"{PREPARE_TIMEOUT:g} s; runner killed")
        except ChildDied as died:
            # Before "started" the candidate's code is not even loaded: never its fault.
            if not started:
                return self._lose(f"runner process died while preparing inputs ({died})")
            if died.signal in EXTERNAL_SIGNALS:
                return self._lose(f"runner process killed from outside while timing ({died})")
            return self._replace(ErrorKind.RUNTIME, f"runner process died ({died})")
        return msg[1]

    def _recv(self, timeout: float, should_stop: ShouldStop) -> Any:
        """The runner's next message within ``timeout``; the process is killed and
        `MeasureStopped` raised once ``should_stop`` says so (asked every STOP_POLL_S)."""
        if should_stop is None:
            return self._child.recv(timeout)
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._child.recv(min(STOP_POLL_S, max(deadline - time.monotonic(), 0)))
            except ChildTimeout:
                if time.monotonic() >= deadline:
                    raise
                if should_stop():
                    self._child.kill()  # started again by the next batch's first candidate
                    self._ready = False
                    raise MeasureStopped("the job must stop: its timing was given up, "
                                         "the runner killed") from None

    def _ensure_ready(self) -> None:
        """Start the process if needed and wait for its hello; MeasureUnavailable if it can't."""
        if self._ready:
            return
        if not self._child.started:
            self._child.start()
        try:
            self._child.recv(START_TIMEOUT)
        except (ChildTimeout, ChildDied) as err:
            self._child.kill()
            raise MeasureUnavailable(f"the runner process did not start ({err})") from None
        self._ready = True

    def _exit(self) -> str:
        return self._child.exit_reason()

    def _replace(self, kind: ErrorKind, msg: str) -> MeasureResult:
        """Kill the process and spawn its successor (it warms up while we record this)."""
        self._child.restart()
        self._ready = False
        return MeasureResult.failure(kind, msg)

    def _lose(self, reason: str) -> _Lost:
        self._child.restart()
        self._ready = False
        return _Lost(reason)
