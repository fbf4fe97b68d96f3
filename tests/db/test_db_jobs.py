"""Jobs: creation, lookup, listing, state transitions and progress."""
from __future__ import annotations

from datetime import timezone

import pytest

from autotune.db import Database, JobRecord


def _job(db: Database, make, **overrides) -> JobRecord:
    args = dict(workload=make.workload(), target=make.target(), tuner="xgb", trials=64,
                options={"seed": 3, "early_stopping": 16, "transfer": True})
    args.update(overrides)
    return db.create_job(**args)


def test_create_and_get_job(db: Database, make) -> None:
    job = _job(db, make)
    assert job.state == "queued" and job.trials_done == 0 and job.best_gflops is None
    assert job.workload_key == make.workload().key and job.target_key == make.target().key
    assert job.options == {"seed": 3, "early_stopping": 16, "transfer": True}
    assert job.created_at.tzinfo is not None and job.created_at.utcoffset().total_seconds() == 0
    assert job.started_at is None and job.finished_at is None and job.error is None
    assert db.get_job(job.id) == job
    assert db.get_job(job.id + 1000) is None


def test_state_transitions_stamp_times(db: Database, make) -> None:
    job = _job(db, make)
    running = db.set_job_state(job.id, "running")
    assert running is not None and running.state == "running"
    assert running.started_at is not None and running.finished_at is None
    assert running.started_at.tzinfo == timezone.utc
    # Re-running (restart recovery) keeps the first start time.
    queued = db.set_job_state(job.id, "queued")
    rerun = db.set_job_state(job.id, "running")
    assert queued.started_at == rerun.started_at == running.started_at
    failed = db.set_job_state(job.id, "failed", error="builder crashed")
    assert failed.state == "failed" and failed.error == "builder crashed"
    assert failed.finished_at is not None and failed.finished_at >= failed.started_at


def test_conditional_transition(db: Database, make) -> None:
    job = _job(db, make)
    db.set_job_state(job.id, "done")
    # Cancelling a finished job does not apply.
    assert db.set_job_state(job.id, "cancelled", from_states=("queued", "running")) is None
    assert db.get_job(job.id).state == "done"
    other = _job(db, make)
    cancelled = db.set_job_state(other.id, "cancelled", from_states=("queued", "running"))
    assert cancelled is not None and cancelled.state == "cancelled"
    assert db.set_job_state(999_999, "running") is None


def test_unknown_state_is_rejected(db: Database, make) -> None:
    job = _job(db, make)
    with pytest.raises(ValueError, match="state"):
        db.set_job_state(job.id, "paused")
    with pytest.raises(ValueError, match="state"):
        db.list_jobs(state="paused")
    with pytest.raises(ValueError, match="trials"):
        _job(db, make, trials=-1)


def test_progress(db: Database, make) -> None:
    job = _job(db, make)
    assert db.update_job_progress(job.id, trials_done=32, best_gflops=123.5)
    updated = db.get_job(job.id)
    assert (updated.trials_done, updated.best_gflops) == (32, 123.5)
    assert updated.updated_at >= job.updated_at
    assert not db.update_job_progress(job.id + 1000, trials_done=1, best_gflops=None)


def test_list_jobs_pages_newest_first(db: Database, make) -> None:
    ids = [_job(db, make, trials=i + 1).id for i in range(5)]
    db.set_job_state(ids[1], "running")
    db.set_job_state(ids[3], "running")
    page, total = db.list_jobs(limit=2)
    assert [j.id for j in page] == [ids[4], ids[3]] and total == 5
    page, total = db.list_jobs(offset=4, limit=2)
    assert [j.id for j in page] == [ids[0]] and total == 5
    page, total = db.list_jobs(state="running")
    assert [j.id for j in page] == [ids[3], ids[1]] and total == 2


def test_jobs_in_state_for_restart_recovery(db: Database, make) -> None:
    ids = [_job(db, make).id for _ in range(4)]
    db.set_job_state(ids[0], "running")
    db.set_job_state(ids[2], "done")
    assert [j.id for j in db.jobs_in_state("running", "queued")] == [ids[0], ids[1], ids[3]]
    assert [j.id for j in db.jobs_in_state("done")] == [ids[2]]
    assert db.jobs_in_state() == []


def test_jobs_share_workload_and_target_rows(db: Database, make) -> None:
    a = _job(db, make)
    b = _job(db, make, target=make.target("cuda -arch=sm_90"))
    assert a.workload_key == b.workload_key and b.target_key == "cuda -arch=sm_90"
