"""The timing protocol, in-process with deterministic fake timers."""
from __future__ import annotations

import time

import numpy as np

from autotune.measure.result import MeasureResult
from autotune.measure.timing import (
    CacheFlusher,
    grow_number,
    kernel_timer,
    perf_counter_timer,
    time_repeats,
)
from tests.measure.measure_fakes import BindKernel, EventKernel, FakeKernel

FAR = float("inf")


class FakeClock:
    """A RepeatTimer for a kernel of ``per_call`` seconds; logs each ``number`` asked."""

    def __init__(self, per_call: float) -> None:
        self.per_call, self.asked = per_call, []

    def __call__(self, number: int) -> float:
        self.asked.append(number)
        return number * self.per_call


def test_number_grows_until_a_repeat_lasts_min_repeat():
    clock = FakeClock(1e-4)
    t = time_repeats(clock, number=1, repeat=5, min_repeat_s=0.02, warmup=1, deadline=FAR)
    assert t.number * 1e-4 >= 0.02
    assert clock.asked[0] == 1  # the warm-up call
    assert clock.asked[-5:] == [t.number] * 5  # every repeat at the final number
    assert t.costs == (1e-4,) * 5 and not t.truncated


def test_growth_uses_the_estimate_but_always_grows():
    assert grow_number(1, 1e-3, 0.02) == 22  # 20 calls needed, 10% margin
    assert grow_number(10, 0.0199, 0.02) == 12
    assert grow_number(4, 0.0, 0.02) == 40  # too short to time at all
    assert grow_number(100, 0.5, 0.02) == 101


def test_slow_kernel_needs_no_growth_and_keeps_every_repeat():
    clock = FakeClock(0.05)
    t = time_repeats(clock, number=1, repeat=3, min_repeat_s=0.02, warmup=0, deadline=FAR)
    assert t.number == 1 and len(t.costs) == 3


def test_median_of_repeats_is_the_cost():
    times = iter([0.0, 3.0, 1.0, 2.0, 100.0, 1.5])  # calibration, then five repeats
    t = time_repeats(lambda n: next(times) + 1.0, number=1, repeat=5, min_repeat_s=0.5,
                     warmup=0, deadline=FAR)
    assert MeasureResult(costs=t.costs).cost == 3.0


def test_deadline_truncates_but_keeps_one_repeat():
    t = time_repeats(FakeClock(0.03), number=1, repeat=5, min_repeat_s=0.02, warmup=1,
                     deadline=time.perf_counter())
    assert len(t.costs) == 1 and t.truncated


def test_growth_stops_short_of_min_repeat_rather_than_pass_the_deadline():
    """A repeat grown to min_repeat_s, and one more, would not fit the run budget left (as
    on a busy host, where a kernel's speed swings): the protocol times at the number it
    has, so the run keeps a cost instead of being killed at its timeout."""
    clock = FakeClock(1e-4)
    t = time_repeats(clock, number=1, repeat=5, min_repeat_s=0.02, warmup=0,
                     deadline=time.perf_counter() + 0.01)
    assert t.number == 1 and clock.asked == [1] * 6 and len(t.costs) == 5


def test_flush_runs_before_each_repeat():
    flushes = []
    time_repeats(FakeClock(0.03), number=1, repeat=4, min_repeat_s=0.0, warmup=0,
                 deadline=FAR, flush=lambda: flushes.append(1))
    assert len(flushes) == 4
    CacheFlusher(1 << 16)()  # allocates once, rewrites every byte: must not raise


def test_kernel_timer_prefers_events_then_bind_then_call():
    a, out = np.ones(8, np.float32), np.zeros(8, np.float32)
    assert kernel_timer(EventKernel("copy"), [a, out])(10) == 10e-3
    before = BindKernel.calls
    kernel_timer(BindKernel("copy"), [a, out])(3)
    assert BindKernel.calls == before + 3
    out[:] = 0
    assert kernel_timer(FakeKernel("copy"), [a, out])(1) >= 0 and out[0] == 1


def test_perf_counter_timer_measures_wall_time():
    assert perf_counter_timer(lambda: time.sleep(0.002))(3) >= 0.006
