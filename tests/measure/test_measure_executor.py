"""LocalExecutor: build then run, results in input order, per-batch stats, GPU pipelining."""
from __future__ import annotations

import os
import threading
import time

import pytest

from autotune.measure import (
    ErrorKind,
    LocalBuilder,
    LocalExecutor,
    LocalRunner,
    MeasureInput,
    MeasureOptions,
)
from autotune.target import Target
from tests.measure.measure_fakes import CopyWorkload, fake_build, fake_load

OPTS = MeasureOptions(repeat=2, min_repeat_ms=1.0, run_timeout=2.0, build_timeout=2.0,
                      n_build_workers=2)
WL = CopyWorkload(64)
MODES = ("copy", "invalid", "zeros", "compile_error", "bind", "raise", "copy")
KINDS = [ErrorKind.NONE, ErrorKind.INSTANTIATION, ErrorKind.WRONG_ANSWER, ErrorKind.COMPILE,
         ErrorKind.NONE, ErrorKind.RUNTIME, ErrorKind.NONE]


def _executor(target: Target) -> LocalExecutor:
    return LocalExecutor(target, OPTS,
                         builder=LocalBuilder(2, OPTS.build_timeout, build_fn=fake_build),
                         runner=LocalRunner(target, OPTS, load_fn=fake_load))


@pytest.fixture(scope="module", params=["llvm", "cuda -arch=sm_90"])
def executor(request):
    with _executor(Target(request.param)) as ex:
        yield ex


def test_results_in_input_order_and_failed_builds_are_not_run(executor):
    inputs = [MeasureInput(WL, executor.target, m) for m in MODES]
    results = executor.submit(inputs)
    assert [r.error for r in results] == KINDS
    for mode, r in zip(MODES, results):
        built = mode not in ("invalid", "compile_error")
        assert (r.run_s > 0) == built
        if built:
            assert r.build_s == 0.001  # the artifact's own build time
    stats = executor.last_stats
    assert stats is not None and (stats.n, stats.n_built, stats.n_ok) == (7, 5, 3)
    assert stats.build_s > 0 and stats.run_s > 0 and stats.total_s >= stats.build_s
    assert executor.pipelined == (executor.target.kind == "cuda")


def test_threads_may_share_one_executor(executor):
    out: dict[int, list] = {}

    def job(k: int) -> None:
        out[k] = executor.submit([MeasureInput(WL, executor.target, m) for m in MODES])

    threads = [threading.Thread(target=job, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [[r.error for r in rs] for rs in out.values()] == [KINDS, KINDS]


def test_empty_batch_and_foreign_target(executor):
    assert executor.submit([]) == []
    other = Target("llvm -cores=1") if executor.target.kind == "cuda" else Target("cuda")
    with pytest.raises(ValueError, match="differs"):
        executor.submit([MeasureInput(WL, other, "copy")])


def test_every_result_says_who_measured_it(executor):
    from autotune.measure.provenance import cpu_model

    results = executor.submit([MeasureInput(WL, executor.target, m) for m in MODES])
    for r in results:
        who = r.extra["measured_by"]
        assert who["worker"].startswith("local:") and who["host"] and who["version"]
    if executor.target.kind == "llvm":
        assert results[0].extra["measured_by"]["device"] == cpu_model()


def test_a_config_twice_in_a_batch_is_built_once_and_timed_each_time():
    """The re-timing's interleaved rounds (A B A B A B) build each config once."""
    import autotune

    class Counting(LocalBuilder):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.batches: list[list[int]] = []

        def build(self, inputs, should_stop=None):
            self.batches.append([i.config.index for i in inputs])
            return super().build(inputs, should_stop)

    target = Target("llvm")
    wl = autotune.workload("matmul", M=16, N=16, K=16)
    space = autotune.config_space(wl, target)
    a, b = space.default(), space.get((space.default().index + 1) % len(space))
    builder = Counting(1, 30.0)
    with LocalExecutor(target, MeasureOptions(repeat=2, min_repeat_ms=1.0),
                       builder=builder) as executor:
        results = executor.submit([MeasureInput(wl, target, c) for c in (a, b) * 3])
    assert builder.batches == [[a.index, b.index]]
    assert [r.ok for r in results] == [True] * 6 and executor.last_stats.n_built == 6


def _cpu_s(pid: int) -> float:
    """CPU seconds a live process has used (user and system)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.parametrize("spec", ["llvm", "cuda -arch=sm_90"])
def test_a_job_that_must_stop_gives_up_its_batch_and_kills_its_runner(spec: str) -> None:
    """Its view (`for_job`) gives up a batch within a poll of being told, killing the
    runner mid-timing (its 40 repeats would last 8 s); the next batch starts a fresh one.
    The CPU path times a real kernel; the GPU path (no GPU here: a stand-in kernel) is the
    pipelined one."""
    from autotune import config_space
    from autotune.measure import MeasureStopped
    from autotune.ops import workload

    target = Target(spec)
    slow = MeasureOptions(repeat=40, min_repeat_ms=200.0, run_timeout=10.0, n_build_workers=1)
    if target.kind == "llvm":
        wl = workload("matmul", M=64, N=64, K=64)
        inp = MeasureInput(wl, target, config_space(wl, target).default())
        executor = LocalExecutor(target, slow)
    else:
        inp = MeasureInput(WL, target, "copy")
        executor = LocalExecutor(target, slow,
                                 builder=LocalBuilder(1, 10.0, build_fn=fake_build),
                                 runner=LocalRunner(target, slow, load_fn=fake_load))
    with executor:
        executor.warm_up()
        runner = executor.runner.pid
        stop = threading.Event()
        stopped_at: list[float] = []

        def stop_once_timing() -> None:  # once the runner has computed for a while
            start = _cpu_s(runner)
            while _cpu_s(runner) - start < 0.1:
                time.sleep(0.02)
            stopped_at.append(time.monotonic())
            stop.set()

        threading.Thread(target=stop_once_timing, daemon=True).start()
        with pytest.raises(MeasureStopped):
            executor.for_job(job_id=1, should_stop=stop.is_set).submit([inp])
        assert time.monotonic() - stopped_at[0] < 1.0
        assert not _alive(runner) and executor.runner.pid is None
        executor.warm_up()  # what the next batch does first: a fresh runner
        assert executor.runner.pid not in (None, runner) and _alive(executor.runner.pid)
