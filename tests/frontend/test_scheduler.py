"""The model run's task scheduler, alone and driving synthetic tasks (no hardware)."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

from autotune.db import Database
from autotune.driver import config_space
from autotune.frontend import ModelTasks, Task, tune_tasks
from autotune.frontend.scheduler import TaskScheduler
from autotune.measure.executor import Executor
from autotune.ops import workload
from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective
from autotune.target import Target

TARGET = Target("llvm -mcpu=skylake -cores=2")


def test_warm_up_visits_every_task_in_order_first():
    s = TaskScheduler([1, 1, 1], [10, 10, 10], ["a", "a", "a"], epsilon=0.0)
    order = []
    for _ in range(3):
        i = s.next_task()
        order.append(i)
        s.observe(i, 1.0)
    assert order == [0, 1, 2]


def test_gradient_prefers_the_task_that_dominates_latency():
    s = TaskScheduler([1, 4], [1000, 1000], ["a", "b"], epsilon=0.0)
    s.observe(0, 1e-3)
    s.observe(1, 1e-3)  # same cost, four times the weight
    assert s.next_task() == 1
    assert s.gradient(1) == pytest.approx(4 * s.gradient(0))
    assert s.estimated_latency() == pytest.approx(5e-3)


def test_a_flat_curve_loses_to_a_falling_one():
    s = TaskScheduler([1, 1], [1000, 1000], ["a", "b"], epsilon=0.0)
    for cost_b in (1.0, 0.8, 0.6, 0.4):  # both end at 0.4; only b is still improving
        s.observe(0, 0.4)
        s.observe(1, cost_b)
    assert s.gradient(1) < s.gradient(0) < 0
    assert s.next_task() == 1


def test_tasks_without_a_valid_config_are_retired_after_a_few_rounds():
    s = TaskScheduler([1, 1], [1, 1], ["a", "a"], epsilon=0.0)
    s.observe(1, 1.0)
    for _ in range(3):
        assert s.next_task() == 0  # unknown latency: looked at first
        s.observe(0, None)
    assert s.live() == [1] and s.estimated_latency() is None


class PerWorkload(Executor):
    """A synthetic executor per workload: each task has its own objective and scale."""

    def __init__(self, bases: dict) -> None:
        self.by_key = {wl.key: SyntheticExecutor(SyntheticObjective(config_space(wl, TARGET),
                                                                    seed=i, base=base))
                       for i, (wl, base) in enumerate(bases.items())}

    def submit(self, inputs):
        keys = {inp.workload.key for inp in inputs}
        assert len(keys) == 1  # a round measures one task
        return self.by_key[keys.pop()].submit(inputs)

    def measured(self, wl) -> int:
        return len(self.by_key[wl.key].submitted)

    def close(self) -> None:
        pass


BIG = workload("matmul", M=256, N=256, K=256)
SMALL = workload("matmul", M=16, N=16, K=16)
CONV = workload("conv2d", N=1, C=16, H=14, W=14, K=16, R=3, S=3, stride=1, pad=1)
MODEL = ModelTasks("toy", (Task(BIG, 1, ("fc1",)), Task(SMALL, 3, ("fc2", "fc3", "fc4")),
                           Task(CONV, 2, ("c1", "c2"))), ())


def test_budget_goes_where_latency_is(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    exe = PerWorkload({BIG: 5e-3, SMALL: 1e-5, CONV: 1e-4})
    result = tune_tasks(MODEL, trials=160, target=TARGET, db=url, tuner="ga", executor=exe)
    assert result.trials == result.trials_done == 160
    trials = {t.name: t.trials for t in result.tasks}
    assert trials[str(BIG)] > trials[str(CONV)] > trials[str(SMALL)] >= 8
    # the re-timing re-measured the top configs of each task (not counted as trials)
    assert exe.measured(BIG) > trials[str(BIG)]
    est = result.estimated_latency_s
    assert est == pytest.approx(sum(t.weight * t.best_cost for t in result.tasks))
    db = Database(url)
    run = db.get_run(result.run_id)
    assert run.state == "done" and run.trials_done == 160 and run.budget == 160
    assert run.estimated_latency_s == pytest.approx(est)
    lat = [c for _, _, c in run.history if c is not None]
    assert lat[0] > lat[-1]
    assert [n for _, n, _ in run.history] == sorted(n for _, n, _ in run.history)
    jobs = db.run_jobs(result.run_id)
    assert len(jobs) == 3 and all(j.state == "done" and j.owner is None for j in jobs)
    assert sum(j.trials_done for j in jobs) == 160
    db.dispose()


def test_a_rerun_spends_only_the_rest_of_the_budget(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    bases = {BIG: 5e-3, SMALL: 1e-5, CONV: 1e-4}
    first = tune_tasks(MODEL, trials=48, target=TARGET, db=url, tuner="ga",
                       executor=PerWorkload(bases))
    exe = PerWorkload(bases)
    shown = io.StringIO()
    again = tune_tasks(MODEL, trials=96, target=TARGET, db=url, tuner="ga", executor=exe,
                       progress=shown)
    assert again.run_id == first.run_id
    # the run names what earlier runs spent of the budget first, and says which task it
    # re-times after its last round (before, it was silent for minutes there)
    lines = shown.getvalue().splitlines()
    spent = ", ".join(f"task {t.index} {t.name}: {t.trials}" for t in first.tasks if t.trials)
    assert lines[0] == (f"model run {first.run_id}: 48 of its 96 trials are already in the "
                        f"database and count against the budget ({spent}); 48 remain")
    retimed = [line for line in lines if "re-timing task" in line]
    assert retimed and all(line.startswith("[96/96] re-timing task ") for line in retimed)
    assert lines.index(retimed[-1]) < lines.index(next(
        line for line in lines if line.startswith(f"model run {first.run_id}: 96/96 trials")))
    assert (first.trials, again.trials, again.trials_done) == (48, 48, 96)
    assert sum({t.name: t.trials for t in again.tasks}.values()) == 96
    done = tune_tasks(MODEL, trials=96, target=TARGET, db=url, tuner="ga",
                      executor=PerWorkload(bases))
    assert done.trials == 0 and done.trials_done == 96
    db = Database(url)
    # a job per task that had a round in a call: all three in the first (warm-up)
    tuned_again = [t.job_id for t in again.tasks if t.job_id is not None]
    assert tuned_again and len(db.run_jobs(first.run_id)) == 3 + len(tuned_again)
    assert db.get_run(first.run_id).budget == 96
    db.dispose()
