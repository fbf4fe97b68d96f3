"""Results of stored records: one reading of error kinds for the loop and the replay."""
from __future__ import annotations

from autotune.db.values import TrialRecord
from autotune.measure.result import ErrorKind, MeasureResult


def test_unknown_error_kinds_are_failures() -> None:
    assert ErrorKind.known("wrong_answer") is ErrorKind.WRONG_ANSWER
    assert ErrorKind.known("none") is ErrorKind.NONE
    assert ErrorKind.known("melted") is ErrorKind.RUNTIME  # a newer version's kind


def test_a_record_becomes_the_result_it_records() -> None:
    record = TrialRecord(workload_key="w", target_key="t", config={"index": 1}, config_index=1,
                         costs=(1e-3, 2e-3), cost=1.5e-3, gflops=1.0, error="melted",
                         error_msg="?", build_s=0.5, run_s=0.25, timestamp=9.0,
                         extra={"worker": "w1"})
    result = MeasureResult.from_record(record)
    assert result.error is ErrorKind.RUNTIME and not result.ok
    assert (result.costs, result.build_s, result.run_s, result.timestamp, dict(result.extra)) \
        == ((1e-3, 2e-3), 0.5, 0.25, 9.0, {"worker": "w1"})


def test_one_executor_protocol() -> None:
    import autotune.measure as measure
    import autotune.search as search
    import autotune.search.loop as loop

    assert search.Executor is measure.Executor is loop.Executor
