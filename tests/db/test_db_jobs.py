"""Jobs: creation, lookup, listing, state transitions and progress."""
from __future__ import annotations

from datetime import datetime, timezone

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


def test_model_scores_are_replaced_per_refit_and_read_alone(db: Database, make) -> None:
    job = _job(db, make)
    other = _job(db, make)
    assert db.job_model_scores(job.id) is None  # no model yet
    assert db.set_job_model_scores(job.id, batch=8, trials=16, scores={"3": 0.5, "7": -1.25})
    assert db.job_model_scores(job.id) == {"batch": 8, "trials": 16,
                                           "scores": {"3": 0.5, "7": -1.25}}
    # The next refit's scores replace the last ones whole (another model, another scale).
    big = str(2**70)  # config keys are decimal text: indices beyond 64 bits stay exact
    assert db.set_job_model_scores(job.id, batch=16, trials=24, scores={big: 2.0})
    assert db.job_model_scores(job.id) == {"batch": 16, "trials": 24, "scores": {big: 2.0}}
    assert db.job_model_scores(other.id) is None
    assert not db.set_job_model_scores(job.id + 1000, batch=0, trials=1, scores={})
    assert db.job_model_scores(job.id + 1000) is None
    # Job reads do not carry them (a deferred column), and still work around them.
    assert db.get_job(job.id) == job and not hasattr(db.get_job(job.id), "model_scores")
    assert {j.id for j in db.list_jobs()[0]} == {job.id, other.id}


def test_migration_0004_adds_model_scores_to_existing_jobs(db_url: str, tmp_path) -> None:
    import sqlalchemy as sa
    from alembic import command

    from autotune.db.migrate import alembic_config, head_revision

    if db_url.startswith("sqlite"):
        db_url = f"sqlite:///{tmp_path / 'at-0003.db'}"
    db = Database(db_url)
    try:
        if db.engine.dialect.name == "postgresql":
            with db.engine.begin() as conn:
                conn.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        db.upgrade("0003")
        assert db.revision() == "0003"
        now = sa.bindparam("now", type_=sa.DateTime(timezone=True))
        with db.engine.begin() as conn:  # a finished job as revision 0003 stored it
            conn.execute(sa.text("INSERT INTO workloads (key, op, created_at) VALUES "
                                 "('{\"op\":\"fake_mm\"}', 'fake_mm', :now)").bindparams(now),
                         {"now": datetime.now(timezone.utc)})
            conn.execute(sa.text("INSERT INTO targets (key, kind) VALUES ('llvm -x', 'llvm')"))
            conn.execute(sa.text(
                "INSERT INTO jobs (workload_id, target_id, tuner, trials, state, options, "
                "trials_done, created_at, updated_at) VALUES "
                "(1, 1, 'xgb', 16, 'done', '{}', 16, :now, :now)").bindparams(now),
                {"now": datetime.now(timezone.utc)})
            job_id = int(conn.execute(sa.text("SELECT id FROM jobs")).scalar_one())
            conn.execute(sa.text(
                "INSERT INTO trials (workload_id, target_id, job_id, config_key, config, "
                "costs, cost, gflops, error, error_msg, build_s, run_s, timestamp, extra, "
                "created_at) VALUES (1, 1, :job, '5', '{\"index\": 5}', '[0.001]', 0.001, "
                "1.0, 'none', '', 0, 0, 0, '{}', :now)").bindparams(now),
                {"job": job_id, "now": datetime.now(timezone.utc)})
        db.upgrade()
        assert db.revision() == head_revision()
        assert "model_scores" in {c["name"] for c in sa.inspect(db.engine).get_columns("jobs")}
        job = db.get_job(job_id)
        assert job is not None and job.state == "done" and job.trials_done == 16
        assert db.job_model_scores(job_id) is None
        assert db.set_job_model_scores(job_id, batch=8, trials=16, scores={"5": 1.5})
        assert db.job_model_scores(job_id) == {"batch": 8, "trials": 16, "scores": {"5": 1.5}}
        # Down again in place: no rebuild of jobs, so its trials keep their job.
        with db.engine.begin() as conn:
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0003")
        assert db.revision() == "0003"
        assert "model_scores" not in {
            c["name"] for c in sa.inspect(db.engine).get_columns("jobs")}
        with db.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT job_id FROM trials")).scalar_one() == job_id
        with db.engine.begin() as conn:  # and 0003's own downgrade keeps them too
            config = alembic_config()
            config.attributes["connection"] = conn
            command.downgrade(config, "0002")
        assert "model_run_id" not in {
            c["name"] for c in sa.inspect(db.engine).get_columns("jobs")}
        with db.engine.connect() as conn:
            assert conn.execute(sa.text("SELECT job_id FROM trials")).scalar_one() == job_id
    finally:
        db.dispose()
