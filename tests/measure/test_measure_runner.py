"""LocalRunner: a spawned runner process survives crashing, hanging and failing kernels."""
from __future__ import annotations

import threading

import pytest

from autotune.measure import ErrorKind, LocalRunner, MeasureInput, MeasureOptions
from tests.measure.measure_fakes import CopyWorkload, fake_build, fake_load

OPTS = MeasureOptions(repeat=3, min_repeat_ms=1.0, run_timeout=1.5, n_build_workers=1)
WL = CopyWorkload(64)


def _items(*modes: str):
    return [(MeasureInput(WL, None, m), fake_build(WL, None, m)) for m in modes]


@pytest.fixture(scope="module")
def runner():
    with LocalRunner(None, OPTS, load_fn=fake_load) as r:  # target unused by fake kernels
        yield r


def test_crash_and_hang_cost_only_their_own_candidate(runner):
    modes = ("copy", "segfault", "copy", "hang", "bind", "raise", "zeros")
    results = runner.run(_items(*modes))
    kinds = [r.error for r in results]
    assert kinds == [ErrorKind.NONE, ErrorKind.RUNTIME, ErrorKind.NONE, ErrorKind.RUN_TIMEOUT,
                     ErrorKind.NONE, ErrorKind.RUNTIME, ErrorKind.WRONG_ANSWER]
    assert "runner process died (signal 11)" in results[1].error_msg
    assert "exceeded 1.5 s" in results[3].error_msg
    assert results[3].run_s >= 1.5
    assert all(r.run_s > 0 and len(r.costs) == 3 for r in results if r.ok)


def test_process_is_replaced_only_when_it_dies(runner):
    runner.run(_items("copy"))
    pid = runner.pid
    runner.run(_items("copy", "raise", "zeros"))
    assert runner.pid == pid
    runner.run(_items("segfault"))
    assert runner.pid != pid
    assert runner.run(_items("copy"))[0].ok


def test_threads_sharing_a_runner_take_turns(runner):
    out: dict[int, list] = {}

    def job(k: int) -> None:
        out[k] = runner.run(_items("copy", "zeros", "copy"))

    threads = [threading.Thread(target=job, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for results in out.values():
        assert [r.error for r in results] == [ErrorKind.NONE, ErrorKind.WRONG_ANSWER,
                                              ErrorKind.NONE]
