"""`TaskRunner`: one task's tuning loop, run a batch at a time when the scheduler says so.

Each task keeps its own `autotune.tune` loop alive (tuner, cost model, annealing chains) in
a thread of its own; the loop's batch callback hands control back and waits for the next
turn. Exactly one thread runs at any time, so measurements never overlap.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from autotune.search import Progress, TuneResult

LoopFn = Callable[[Callable[[Progress], Optional[bool]]], TuneResult]


class TaskRunner:
    """Runs ``loop(callback)`` one batch per `round`; `close` ends it after its batch."""

    def __init__(self, name: str, loop: LoopFn,
                 must_stop: Callable[[], bool] = lambda: False) -> None:
        self._loop, self._must_stop = loop, must_stop
        self._turn = threading.Semaphore(0)  # scheduler -> task: measure one batch
        self._back = threading.Semaphore(0)  # task -> scheduler: done, or the loop ended
        self._thread = threading.Thread(target=self._main, name=f"autotune-task:{name}",
                                        daemon=True)
        self._stop = False
        self.ended = False
        self.progress: Optional[Progress] = None
        self.result: Optional[TuneResult] = None
        self.error: Optional[BaseException] = None

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def round(self) -> bool:
        """Measure one batch; False when the loop ended instead (see ``result``/``error``)."""
        if self.ended:
            return False
        if not self.started:
            self._thread.start()
        self._turn.release()
        self._back.acquire()
        return not self.ended

    def close(self) -> None:
        """End the loop (after the batch it measures, if any) and wait for its thread."""
        if self.started and not self.ended:
            self._stop = True
            self._turn.release()
            self._thread.join()

    def _main(self) -> None:
        self._turn.acquire()
        try:
            self.result = self._loop(self._after_batch)
        except BaseException as exc:  # handed to the scheduler's thread, which decides
            self.error = exc
        finally:
            self.ended = True
            self._back.release()

    def _after_batch(self, progress: Progress) -> Optional[bool]:
        self.progress = progress
        self._back.release()
        self._turn.acquire()
        return False if self._stop or self._must_stop() else None


def loop_call(tune: Callable[..., TuneResult], **kwargs: Any) -> LoopFn:
    """A `LoopFn` calling ``tune(callbacks=[callback], **kwargs)``."""
    return lambda callback: tune(callbacks=[callback], **kwargs)
