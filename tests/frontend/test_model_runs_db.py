"""The model_runs table: runs, their task jobs, resuming, and the job manager leaving them."""
from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from autotune.db import Database
from autotune.db import model_runs as runs
from autotune.db.schema import utcnow
from autotune.ops import workload
from autotune.target import Target

TARGET = Target("llvm -mcpu=skylake -cores=2")
WL = workload("matmul", M=64, N=64, K=64)


@pytest.fixture
def db(tmp_path: Path):
    database = Database.open(f"sqlite:///{tmp_path / 'runs.db'}")
    yield database
    database.dispose()


def new_run(db: Database, owner: str = "elsewhere:1:aa") -> runs.ModelRunRecord:
    return db.create_run(name="Net", fingerprint="f" * 40, target=TARGET, budget=100,
                         tasks=[{"workload": WL.to_dict(), "weight": 2, "nodes": ["a", "b"]}],
                         unsupported=[{"node": "g", "op": "conv2d", "reason": "groups=2"}],
                         owner=owner)


def test_run_round_trip_and_history(db: Database):
    run = new_run(db)
    db.update_run(run.id, trials_done=8, estimated_latency_s=None, elapsed_s=1.0)
    db.update_run(run.id, trials_done=16, estimated_latency_s=2e-3, elapsed_s=2.5)
    got = db.get_run(run.id)
    assert got.history == ((1.0, 8, None), (2.5, 16, 2e-3))
    assert (got.trials_done, got.estimated_latency_s, got.state) == (16, 2e-3, "running")
    assert got.tasks[0]["weight"] == 2 and got.unsupported[0]["op"] == "conv2d"
    assert db.latest_run("f" * 40, TARGET.key).id == run.id
    assert db.latest_run("f" * 40, "llvm -mcpu=other") is None
    db.finish_run(run.id, state="done")
    items, total = db.list_runs()
    assert total == 1 and items[0].state == "done" and items[0].finished_at is not None


def test_task_jobs_are_never_claimed_by_the_job_manager(db: Database):
    run = new_run(db)
    job = db.create_task_job(run.id, workload=WL, target=TARGET, tuner="xgb", trials=100,
                             options={}, owner="elsewhere:1:aa", lease_s=0.01)
    later = utcnow() + timedelta(seconds=60)  # its lease has long expired
    assert db.claim_job("service:2:bb", 30.0, now=later) is None
    standalone = db.create_job(workload=WL, target=TARGET, tuner="xgb", trials=10, options={})
    assert db.claim_job("service:2:bb", 30.0, now=later).id == standalone.id
    assert [j.id for j in db.run_jobs(run.id)] == [job]


def test_take_run_refuses_a_live_owner_and_ends_stale_jobs(db: Database):
    run = new_run(db, owner="otherhost:1:aa")  # alive as far as this host can tell
    with pytest.raises(runs.RunBusy):
        db.take_run(run.id, owner="me:2:bb", budget=200)
    job = db.create_task_job(run.id, workload=WL, target=TARGET, tuner="xgb", trials=100,
                             options={}, owner="otherhost:1:aa", lease_s=30)
    taken = db.take_run(run.id, owner="me:2:bb", budget=200, stale_after_s=0)
    assert (taken.owner, taken.budget, taken.state) == ("me:2:bb", 200, "running")
    (ended,) = db.run_jobs(run.id)
    assert ended.id == job and ended.state == "cancelled" and ended.owner is None


def test_task_trials_counts_records_and_best(db: Database):
    from autotune.driver import config_space
    from autotune.measure.result import ErrorKind, MeasureResult

    sp = config_space(WL, TARGET)
    db.add_trials(WL, TARGET, None, [(sp.get(0), MeasureResult(costs=(2e-3,))),
                                     (sp.get(1), MeasureResult(costs=(1e-3,))),
                                     (sp.get(2), MeasureResult.failure(ErrorKind.COMPILE, "x")),
                                     (sp.get(3), MeasureResult.failure(ErrorKind.TRANSIENT, "x"))],
                  WL.flops())
    other = workload("matmul", M=8, N=8, K=8)
    held = db.task_trials([WL.key, other.key], TARGET.key)
    assert held[WL.key] == runs.TaskTrials(3, 1e-3)
    assert held[other.key] == runs.TaskTrials(0, None)
