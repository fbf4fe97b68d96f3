"""Shared executors: on the host, one job's search and model updates never run beside
another job's timing; on a GPU they may."""
from __future__ import annotations

import threading
import time
from typing import Any, Sequence

from autotune.ops import workload
from autotune.search import tune_loop
from autotune.search.registry import make_tuner
from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective
from autotune.service.executors import ExecutorPool
from autotune.space import Choice, ConfigSpace
from autotune.target import Target

STEP_S = 0.01  # each search step and each timing takes this long


class Timeline:
    """Spans of (job, what, start, end) recorded from several threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[tuple[str, str, float, float]] = []

    def run(self, what: str, fn: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        time.sleep(STEP_S)
        out = fn(*args)
        with self.lock:
            self.spans.append((threading.current_thread().name, what, t0,
                               time.perf_counter()))
        return out

    def overlaps(self) -> int:
        """Pairs of one job's search span and another job's timing span that overlap."""
        search = [s for s in self.spans if s[1] == "search"]
        timing = [s for s in self.spans if s[1] == "time"]
        return sum(1 for a in search for b in timing
                   if a[0] != b[0] and a[2] < b[3] and b[2] < a[3])


class TimedExecutor(SyntheticExecutor):
    def __init__(self, objective: SyntheticObjective, timeline: Timeline) -> None:
        super().__init__(objective)
        self.timeline = timeline

    def submit(self, inputs: Sequence[Any]) -> list[Any]:
        return self.timeline.run("time", super().submit, inputs)


class TimedTuner:
    """A random tuner whose batch choice and update take a while (as xgb's do)."""

    def __init__(self, inner: Any, timeline: Timeline) -> None:
        self.inner, self.timeline = inner, timeline

    def next_batch(self, n: int) -> list[Any]:
        return self.timeline.run("search", self.inner.next_batch, n)

    def update(self, inputs: Sequence[Any], results: Sequence[Any]) -> None:
        self.timeline.run("search", self.inner.update, inputs, results)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def run_two_jobs(target: Target) -> Timeline:
    space = ConfigSpace([Choice(f"k{i}", list(range(8))) for i in range(4)], name="fake")
    timeline = Timeline()
    pool = ExecutorPool(lambda t, measure: TimedExecutor(SyntheticObjective(space), timeline))
    executor = pool.get(target)

    def tuner(space: ConfigSpace, **kwargs: Any) -> TimedTuner:
        return TimedTuner(make_tuner("random", space, **kwargs), timeline)

    def job() -> None:
        tune_loop(workload("matmul", M=64, N=64, K=64), target, space, executor, trials=40,
                  batch_size=4, tuner=tuner, retime=0)

    threads = [threading.Thread(target=job, name=f"job{i}") for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    pool.close()
    assert len([s for s in timeline.spans if s[1] == "time"]) == 20  # 2 jobs x 10 batches
    return timeline


def test_host_search_never_overlaps_another_jobs_timing():
    assert run_two_jobs(Target("llvm")).overlaps() == 0


def test_gpu_search_runs_beside_another_jobs_timing():
    # the GPU times with its own clock: serialising the host's search would only cost time
    timeline = run_two_jobs(Target("cuda"))
    assert timeline.overlaps() > 0


def test_a_shared_executor_names_the_job_holding_it_and_none_else():
    """The Workers view shows this host busy only with a job: the job whose batch or search
    holds the device now, and idle when the lock is free."""
    space = ConfigSpace([Choice("k", list(range(8)))], name="one")
    seen: list[Any] = []

    class Watching(SyntheticExecutor):
        def submit(self, inputs: Sequence[Any]) -> list[Any]:
            seen.append(shared.job)
            return super().submit(inputs)

    pool = ExecutorPool(lambda target, options: Watching(SyntheticObjective(space)))
    with pool.use(Target("llvm")) as shared:
        assert shared.job is None
        mine = shared.for_job(job_id=7)
        mine.submit([])
        with mine.host_work():
            assert shared.job == 7 and shared.lock.locked()
        shared.submit([])  # the lock held for no job: nobody to name
    assert seen == [7, None] and shared.job is None
