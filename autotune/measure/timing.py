"""The timing protocol: warm-up, grow ``number`` to ``min_repeat_ms``, then ``repeat`` repeats.

Pure functions over a ``RepeatTimer`` (seconds for ``number`` calls), so the protocol is the
same for a CPU kernel timed with ``perf_counter`` and a GPU kernel timed with CUDA events.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np

RepeatTimer = Callable[[int], float]
FLUSH_BYTES = 64 << 20  # larger than the last-level cache of the CPUs we target
MAX_NUMBER = 1 << 30


@dataclass(frozen=True)
class Timing:
    """Seconds per call of every repeat, the calls per repeat, and whether the run budget
    cut the repeats short."""

    costs: tuple[float, ...]
    number: int
    truncated: bool = False


def time_repeats(timer: RepeatTimer, *, number: int, repeat: int, min_repeat_s: float,
                 warmup: int, deadline: float, flush: Optional[Callable[[], None]] = None
                 ) -> Timing:
    """Run the protocol; stop early (keeping >= 1 repeat) when ``deadline`` (perf_counter)
    would be passed, so a slow but valid kernel still gets a cost. Growing ``number`` stops
    short of ``min_repeat_s`` too when the grown repeat, and one more, would pass the
    deadline (a busy host makes a kernel's speed swing between tries)."""
    if warmup:
        timer(warmup)
    t = timer(number)
    while t < min_repeat_s and number < MAX_NUMBER:
        grown = grow_number(number, t, min_repeat_s)
        if time.perf_counter() + 2 * t * grown / number > deadline:
            break
        number, t = grown, timer(grown)
    costs: list[float] = []
    for _ in range(repeat):
        if costs and time.perf_counter() + t > deadline:
            return Timing(tuple(costs), number, truncated=True)
        if flush is not None:
            flush()
        t = timer(number)
        costs.append(t / number)
    return Timing(tuple(costs), number)


def grow_number(number: int, seconds: float, min_repeat_s: float) -> int:
    """Calls per repeat for the next try: the estimate from the last repeat with 10% margin,
    at least one more; x10 when the last repeat was too short to time."""
    if seconds <= 0:
        return min(number * 10, MAX_NUMBER)
    estimate = math.ceil(number * min_repeat_s / seconds * 1.1)
    return min(max(estimate, number + 1), MAX_NUMBER)


def perf_counter_timer(run: Callable[[], None]) -> RepeatTimer:
    """A timer calling the zero-argument ``run`` back to back."""
    def timer(number: int) -> float:
        t0 = time.perf_counter()
        for _ in range(number):
            run()
        return time.perf_counter() - t0
    return timer


def kernel_timer(kernel: Any, arrays: Sequence[Any]) -> RepeatTimer:
    """The best timer the kernel offers: its own ``time`` (CUDA events, seconds per call),
    else ``perf_counter`` around ``kernel.bind(*arrays)`` or ``kernel(*arrays)``."""
    if callable(getattr(kernel, "time", None)):
        return lambda number: float(kernel.time(arrays, number, 1)[0]) * number
    if callable(getattr(kernel, "bind", None)):
        return perf_counter_timer(kernel.bind(*arrays))
    return perf_counter_timer(lambda: kernel(*arrays))


class CacheFlusher:
    """Evicts the CPU caches by rewriting a buffer larger than the LLC; allocated on first use."""

    def __init__(self, nbytes: int = FLUSH_BYTES) -> None:
        self.nbytes = nbytes
        self._buf: Optional[np.ndarray] = None

    def __call__(self) -> None:
        if self._buf is None:
            self._buf = np.zeros(self.nbytes, dtype=np.uint8)
        np.add(self._buf, 1, out=self._buf)  # read and write every line
