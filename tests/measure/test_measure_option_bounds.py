"""Every measurement option is bounded in one table (`autotune.job_options.MEASURE_BOUNDS`),
which the library's `MeasureOptions`, the `AUTOTUNE_*` settings and every job's options
share; and the extremes of those bounds measure a real kernel without overflowing a timer
(the REST API's walk over them: tests/service/test_service_job_settings.py)."""
from __future__ import annotations

import math
import time

import pytest
from pydantic import ValidationError

from autotune import config_space
from autotune.job_options import MEASURE_BOUNDS, MEASURE_FIELDS, JobOptions, MeasureOverrides
from autotune.measure import LocalExecutor, MeasureInput, MeasureOptions
from autotune.measure.timing import time_repeats
from autotune.ops import workload
from autotune.settings import Settings
from autotune.target import Target


def edges(name: str) -> tuple[list[float], list[float]]:
    """(values at the bounds, values one past them) of option ``name``."""
    bound = MEASURE_BOUNDS[name]
    low, high = bound.minimum, bound.maximum
    if bound.kind is int:
        return [low, high], [low - 1, high + 1]
    return [low, high], [math.nextafter(low, -math.inf), math.nextafter(high, math.inf),
                         math.nan, math.inf]


@pytest.mark.parametrize("name", sorted(MEASURE_BOUNDS))
def test_the_library_takes_each_option_at_its_bounds_and_refuses_one_past(name: str) -> None:
    inside, outside = edges(name)
    for value in inside:
        assert getattr(MeasureOptions(**{name: value}), name) == value
    for value in outside:
        with pytest.raises(ValueError, match=f"MeasureOptions.{name} must be"):
            MeasureOptions(**{name: value})


@pytest.mark.parametrize("name", MEASURE_FIELDS)
def test_settings_and_jobs_take_the_same_bounds(name: str, monkeypatch) -> None:
    inside, outside = edges(name)
    for value in inside:
        assert getattr(Settings(**{name: value}), name) == value
        assert MeasureOverrides(**{name: value}).given() == {name: value}
    for value in outside:
        with pytest.raises(ValidationError, match=name):
            Settings(**{name: value})
        with pytest.raises(ValueError, match=f"measure_options.{name} must be"):
            MeasureOverrides(**{name: value})
        # a job row written before the bounds fails to load, naming the option
        with pytest.raises(ValueError, match=f"measure_options.{name}"):
            JobOptions.from_row("random", 8, {"measure_options": {name: value}})
    monkeypatch.setenv(f"AUTOTUNE_{name.upper()}", str(outside[-1]))
    with pytest.raises(ValidationError, match=name):
        Settings()


def test_job_options_round_trip_and_old_rows_load() -> None:
    job = JobOptions(tuner="ga", trials=40, batch_size=16, seed=3, early_stopping=10,
                     transfer=False, tuner_options={"pop_size": 8},
                     measure=MeasureOverrides(repeat=3, run_timeout=4.0))
    assert JobOptions.from_row("ga", 40, job.to_json()) == job
    # a library row from before: every MeasureOptions field kept; only the job's are read
    old = {"seed": 1, "measure_options": {"repeat": 2, "warmup": 1, "n_build_workers": 4}}
    assert JobOptions.from_row("random", 8, old).measure == MeasureOverrides(repeat=2)
    assert JobOptions.from_row("random", 8, {}).batch_size == 8
    with pytest.raises(ValueError, match="measure_options.warmup"):
        MeasureOverrides.from_mapping({"warmup": 1})
    with pytest.raises(ValueError, match="batch_size"):
        JobOptions(tuner="random", trials=8, batch_size=0)


def test_the_longest_timeouts_and_most_repeats_measure_a_real_kernel() -> None:
    """The longest timeouts wait in poll(2) without overflowing it, and the most repeats
    still give a cost, each stored."""
    wl, target = workload("matmul", M=16, N=16, K=16), Target("llvm")
    inp = MeasureInput(wl, target, config_space(wl, target).default())
    top = {name: MEASURE_BOUNDS[name].maximum for name in MEASURE_FIELDS}
    options = MeasureOptions(**{**top, "number": 1, "min_repeat_ms": 0.0}, n_build_workers=1)
    with LocalExecutor(target, options) as executor:
        (result,) = executor.submit([inp])
    assert result.ok, result.error_msg
    assert len(result.costs) == options.repeat


def test_the_longest_repeat_fits_the_shortest_run_budget() -> None:
    """Growing `number` to the largest min_repeat_ms, then the repeats, stay within the run
    budget of the shortest run_timeout (`run_worker` stops repeating at 80% of it), for a
    kernel of a millisecond a call (sleeping: the host's load does not change it)."""
    budget = MEASURE_BOUNDS["run_timeout"].minimum * 0.8
    per_call = 1e-3

    def timer(number: int) -> float:
        time.sleep(number * per_call)
        return number * per_call

    started = time.perf_counter()
    timing = time_repeats(timer, number=1, repeat=int(MEASURE_BOUNDS["repeat"].maximum),
                          min_repeat_s=MEASURE_BOUNDS["min_repeat_ms"].maximum / 1e3,
                          warmup=1, deadline=started + budget)
    assert time.perf_counter() - started < MEASURE_BOUNDS["run_timeout"].minimum
    assert timing.number * per_call >= MEASURE_BOUNDS["min_repeat_ms"].maximum / 1e3
    assert len(timing.costs) >= 1 and timing.truncated
