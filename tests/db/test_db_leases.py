"""Job leases: claiming, renewing, releasing, waiting, concurrent claimers, the lease keeper,
and the migration that added them (on SQLite and PostgreSQL)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Optional

import pytest
import sqlalchemy as sa

from autotune.db import Database, JobRecord
from autotune.db.lease import LeaseKeeper, is_dead_local, new_owner
from autotune.db.migrate import head_revision
from autotune.search.result import Retimed

LEASE = 30.0
HERE = socket.gethostname()


def _job(db: Database, make, **kwargs: Any) -> JobRecord:
    return db.create_job(workload=make.workload(), target=make.target(), tuner="random",
                         trials=16, options={}, **kwargs)


def _later(seconds: float) -> datetime:
    return datetime.now(timezone.utc) + timedelta(seconds=seconds)


def _dead_pid() -> int:
    """The pid of a process of this host that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(30)
    return proc.pid


def test_claim_takes_the_oldest_unowned_job(db: Database, make) -> None:
    first, second, third = (_job(db, make) for _ in range(3))
    db.set_job_state(third.id, "cancelled")
    claimed = db.claim_job("host-a:1:aa", LEASE)
    assert claimed is not None and claimed.id == first.id
    assert claimed.state == "running" and claimed.owner == "host-a:1:aa"
    assert claimed.waiting is None and claimed.started_at is not None
    lease_left = (claimed.lease_expires_at - datetime.now(timezone.utc)).total_seconds()
    assert LEASE - 5 < lease_left <= LEASE
    other = db.claim_job("host-b:2:bb", LEASE)
    assert other is not None and other.id == second.id and other.owner == "host-b:2:bb"
    assert db.claim_job("host-b:2:bb", LEASE) is None  # the rest is held or ended
    assert db.get_job(first.id).owner == "host-a:1:aa"


def test_expired_leases_are_claimable_and_live_ones_not(db: Database, make) -> None:
    job = _job(db, make, owner="elsewhere:4242:aa", lease_s=LEASE)
    assert job.state == "running" and job.owner == "elsewhere:4242:aa"
    assert db.claim_job("host-b:2:bb", LEASE) is None
    assert db.claim_job("host-b:2:bb", LEASE, now=_later(LEASE - 2)) is None
    taken = db.claim_job("host-b:2:bb", LEASE, now=_later(LEASE + 2))
    assert taken is not None and taken.id == job.id and taken.owner == "host-b:2:bb"
    assert taken.started_at == job.started_at  # stamped once
    # A claimed job that waits (queued) is as safe while its lease lives.
    db.set_job_waiting(job.id, "host-b:2:bb", "no live worker")
    assert db.claim_job("host-c:3:cc", LEASE) is None
    again = db.claim_job("host-c:3:cc", LEASE, now=_later(2 * LEASE + 5))
    assert again is not None and again.owner == "host-c:3:cc" and again.waiting is None


def test_running_jobs_without_an_owner_are_claimable(db: Database, make) -> None:
    # Rows from before leases existed, and jobs a service released on shutdown.
    job = _job(db, make)
    db.set_job_state(job.id, "running")
    assert db.get_job(job.id).owner is None and db.get_job(job.id).lease_expires_at is None
    claimed = db.claim_job("host-a:1:aa", LEASE)
    assert claimed is not None and claimed.id == job.id


def test_a_dead_owner_on_this_host_is_claimable_at_once(db: Database, make) -> None:
    dead = f"{HERE}:{_dead_pid()}:dead"
    alive = f"{HERE}:{os.getpid()}:alive"
    elsewhere = f"not-{HERE}:{_dead_pid()}:far"  # another host: only its lease counts
    assert is_dead_local(dead) and not is_dead_local(alive) and not is_dead_local(elsewhere)
    held_alive = _job(db, make, owner=alive, lease_s=3600)
    held_elsewhere = _job(db, make, owner=elsewhere, lease_s=3600)
    orphan = _job(db, make, owner=dead, lease_s=3600)
    claimed = db.claim_job(new_owner(), LEASE)
    assert claimed is not None and claimed.id == orphan.id
    assert db.claim_job(new_owner(), LEASE) is None
    assert db.get_job(held_alive.id).owner == alive
    assert db.get_job(held_elsewhere.id).owner == elsewhere


def test_ended_jobs_of_gone_owners_are_released_by_claims(db: Database, make) -> None:
    # A job cancelled while its owner was dead: nobody else would ever clear the owner.
    dead = f"{HERE}:{_dead_pid()}:dead"
    by_dead = _job(db, make, owner=dead, lease_s=3600)
    by_expired = _job(db, make, owner="elsewhere:1:aa", lease_s=LEASE)
    by_live = _job(db, make, owner="elsewhere:2:bb", lease_s=3600)
    for job in (by_dead, by_expired, by_live):
        db.set_job_state(job.id, "cancelled")
    assert db.claim_job(new_owner(), LEASE, now=_later(LEASE + 1)) is None
    assert db.get_job(by_dead.id).owner is None and db.get_job(by_expired.id).owner is None
    assert db.get_job(by_live.id).owner == "elsewhere:2:bb"
    assert {db.get_job(j.id).state for j in (by_dead, by_expired, by_live)} == {"cancelled"}


def test_renew_extends_held_leases_and_reports_cancels_and_losses(db: Database, make) -> None:
    a, b = "host-a:1:aa", "host-b:2:bb"
    kept, cancelled = (_job(db, make, owner=a, lease_s=LEASE) for _ in range(2))
    lost = _job(db, make, owner=a, lease_s=5)
    db.set_job_state(cancelled.id, "cancelled", from_states=["queued", "running"])
    assert db.claim_job(b, LEASE, now=_later(10)).id == lost.id  # a's lease ran out
    found = db.renew_leases(a, [kept.id, cancelled.id, lost.id, 99_999], LEASE)
    assert set(found) == {kept.id, cancelled.id, lost.id}
    assert found[kept.id].owner == a and found[kept.id].state == "running"
    assert found[kept.id].lease_expires_at > kept.lease_expires_at
    assert found[cancelled.id].state == "cancelled" and found[cancelled.id].owner == a
    assert found[lost.id].owner == b
    # Renewing never touches another owner's lease.
    assert db.get_job(lost.id).lease_expires_at == found[lost.id].lease_expires_at
    assert db.renew_leases(a, [], LEASE) == {}


def test_release_clears_the_owner_and_may_end_the_job(db: Database, make) -> None:
    a = "host-a:1:aa"
    done, cancelled, resumable = (_job(db, make, owner=a, lease_s=LEASE) for _ in range(3))
    assert db.release_job(done.id, "host-b:2:bb", state="done") is None  # not b's
    assert db.get_job(done.id).state == "running"
    released = db.release_job(done.id, a, state="done")
    assert released.state == "done" and released.finished_at is not None
    assert released.owner is None and released.lease_expires_at is None
    assert db.release_job(done.id, a, state="failed") is None  # released already

    db.set_job_state(cancelled.id, "cancelled")
    failed = db.release_job(cancelled.id, a, state="failed", error="executor closed")
    assert failed.state == "cancelled" and failed.error is None and failed.owner is None

    db.set_job_waiting(resumable.id, a, "no live worker")
    left = db.release_job(resumable.id, a)  # shutdown: as it is, without owner or reason
    assert left.state == "queued" and left.owner is None and left.waiting is None
    assert db.claim_job("host-b:2:bb", LEASE).id == resumable.id
    with pytest.raises(ValueError, match="state"):
        db.release_job(resumable.id, "host-b:2:bb", state="paused")


def test_waiting_round_trip(db: Database, make) -> None:
    a = "host-a:1:aa"
    _job(db, make)
    job = db.claim_job(a, LEASE)
    reason = "no live worker for target llvm -mcpu=testcpu"
    waiting = db.set_job_waiting(job.id, a, reason)
    assert waiting.state == "queued" and waiting.waiting == reason and waiting.owner == a
    assert db.set_job_waiting(job.id, "host-b:2:bb", None) is None  # only the owner
    going = db.set_job_waiting(job.id, a, None)
    assert going.state == "running" and going.waiting is None
    assert going.started_at == job.started_at
    db.set_job_state(job.id, "cancelled")
    assert db.set_job_waiting(job.id, a, reason).state == "cancelled"


def test_create_job_already_claimed(db: Database, make) -> None:
    job = _job(db, make, owner="host-a:1:aa", lease_s=LEASE)
    assert job.state == "running" and job.started_at is not None and job.lease_expires_at
    assert db.claim_job("host-b:2:bb", LEASE) is None
    with pytest.raises(ValueError, match="lease_s"):
        _job(db, make, owner="host-a:1:aa")


def _claim_all(url: str, owner: str, start: threading.Barrier, out: list[int],
               errors: list[BaseException]) -> None:
    db = Database(url)
    try:
        start.wait(30)
        while (job := db.claim_job(owner, LEASE)) is not None:
            out.append(job.id)
    except BaseException as exc:  # reported by the test
        errors.append(exc)
    finally:
        db.dispose()


def test_concurrent_claimers_never_take_the_same_job(db: Database, db_url: str, make) -> None:
    ids = [_job(db, make).id for _ in range(20)]
    claimers = 8
    start = threading.Barrier(claimers)
    got: dict[str, list[int]] = {f"{HERE}:{os.getpid()}:{i}": [] for i in range(claimers)}
    errors: list[BaseException] = []
    threads = [threading.Thread(target=_claim_all, args=(db_url, owner, start, out, errors))
               for owner, out in got.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    claimed = [job_id for out in got.values() for job_id in out]
    assert sorted(claimed) == ids  # every job exactly once
    for owner, out in got.items():
        assert all(db.get_job(job_id).owner == owner for job_id in out)


def _with_options(url: str, options: str) -> str:
    return sa.engine.make_url(url).update_query_dict({"options": options}).render_as_string(
        hide_password=False)


@pytest.mark.postgres
def test_a_frozen_holder_of_a_job_row_loses_it_to_the_idle_transaction_bound(
        fresh_pg_url: str, make) -> None:
    """An owner frozen between a write and its commit holds the job's row lock: claimers skip
    the row, so the server must end that writing transaction for the job to be taken over.
    Readers lock no rows and stay unbounded (an export may wait on a slow consumer)."""
    def bound(db: Database, write: bool) -> str:
        with db.session(write=write) as s:
            return str(s.execute(sa.text("SHOW idle_in_transaction_session_timeout")).scalar())

    db = Database(fresh_pg_url)
    assert (bound(db, write=True), bound(db, write=False)) == ("1min", "0")
    frozen = Database(_with_options(fresh_pg_url, "-c idle_in_transaction_session_timeout=2s"))
    assert bound(frozen, write=True) == "2s"  # a bound the URL sets is kept
    try:
        job = _job(db, make, owner="elsewhere:4242:aa", lease_s=1.0)
        with pytest.raises(sa.exc.DBAPIError):  # the server ended the frozen transaction
            with frozen.session(write=True) as s:
                s.execute(sa.text("SELECT id FROM jobs WHERE id = :id FOR UPDATE"),
                          {"id": job.id})
                locked = time.monotonic()
                assert db.claim_job("host-b:2:bb", LEASE, now=_later(5)) is None  # held
                taken = _wait(lambda: db.claim_job("host-b:2:bb", LEASE, now=_later(5)), 20)
                assert taken.id == job.id and taken.owner == "host-b:2:bb"
                assert time.monotonic() - locked > 1.5  # not before the bound
    finally:
        frozen.dispose()
        db.dispose()


class _Unreachable(Database):
    """A real database whose lease renewals fail, as while the server is unreachable."""

    def renew_leases(self, *args: Any, **kwargs: Any) -> Any:
        raise sa.exc.OperationalError("renew", {}, Exception("connection refused"))


def _wait(predicate: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_lease_keeper_renews_and_tells_why_to_stop(db: Database, make) -> None:
    owner = new_owner()
    kept, cancelled, lost = (_job(db, make, owner=owner, lease_s=2.0) for _ in range(3))
    keeper = LeaseKeeper(db, owner, 2.0)
    for job in (kept, cancelled, lost):
        keeper.add(job.id)
    keeper.start()
    try:
        db.set_job_state(cancelled.id, "cancelled")
        with db.engine.begin() as conn:  # another process took it over
            conn.execute(sa.text("UPDATE jobs SET owner = 'elsewhere:1:aa' WHERE id = :id"),
                         {"id": lost.id})
        assert _wait(lambda: keeper.stopping(cancelled.id), 5) == "cancelled"
        assert _wait(lambda: keeper.stopping(lost.id), 5) == "lost"
        time.sleep(2.5)  # past the first lease: only renewals keep it
        assert keeper.stopping(kept.id) is None
        assert db.get_job(kept.id).lease_expires_at > datetime.now(timezone.utc)
        # Only the job taken over, whose new owner renews nothing, is claimable.
        assert db.claim_job("host-b:2:bb", LEASE).id == lost.id
        assert db.claim_job("host-b:2:bb", LEASE) is None
        keeper.discard(kept.id)
        assert keeper.stopping(kept.id) is None
    finally:
        keeper.stop()


def test_lease_keeper_expires_jobs_it_cannot_renew(db_url: str, make) -> None:
    db = _Unreachable(db_url)
    try:
        owner = new_owner()
        job = _job(db, make, owner=owner, lease_s=1.0)
        keeper = LeaseKeeper(db, owner, 1.0)
        keeper.add(job.id)
        keeper.start()
        try:
            assert keeper.stopping(job.id) is None
            assert _wait(lambda: keeper.stopping(job.id), 5) == "expired"
        finally:
            keeper.stop()
    finally:
        db.dispose()


def _insert_0001_rows(db: Database) -> int:
    """A workload, a target, a job left 'running' and one trial, as revision 0001 stored
    them; the job's id."""
    now = sa.bindparam("now", type_=sa.DateTime(timezone=True))
    with db.engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO workloads (key, op, created_at) VALUES "
                             "('{\"op\":\"fake_mm\"}', 'fake_mm', :now)").bindparams(now),
                     {"now": datetime.now(timezone.utc)})
        conn.execute(sa.text("INSERT INTO targets (key, kind) VALUES ('llvm -mcpu=x', 'llvm')"))
        conn.execute(sa.text(
            "INSERT INTO jobs (workload_id, target_id, tuner, trials, state, options, "
            "trials_done, created_at, started_at, updated_at) VALUES "
            "(1, 1, 'ga', 48, 'running', '{}', 8, :now, :now, :now)").bindparams(now),
            {"now": datetime.now(timezone.utc)})
        conn.execute(sa.text(
            "INSERT INTO trials (workload_id, target_id, job_id, config_key, config, costs, "
            "cost, gflops, error, error_msg, build_s, run_s, timestamp, extra, created_at) "
            "VALUES (1, 1, 1, '7', '{\"index\": 7}', '[0.001]', 0.001, 1.0, 'none', '', 0, 0, "
            "0, '{}', :now)").bindparams(now), {"now": datetime.now(timezone.utc)})
        return int(conn.execute(sa.text("SELECT id FROM jobs")).scalar_one())


def test_migration_adds_leases_to_a_database_with_jobs(db_url: str, tmp_path: Any) -> None:
    if db_url.startswith("sqlite"):
        db_url = f"sqlite:///{tmp_path / 'at-0001.db'}"
    db = Database(db_url)
    try:
        if db.engine.dialect.name == "postgresql":
            with db.engine.begin() as conn:
                conn.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")
        db.upgrade("0001")
        assert db.revision() == "0001"
        job_id = _insert_0001_rows(db)
        db.upgrade()
        assert db.revision() == head_revision()
        inspector = sa.inspect(db.engine)
        assert {"owner", "lease_expires_at", "waiting"} <= {
            c["name"] for c in inspector.get_columns("jobs")}
        assert "worker" in {c["name"] for c in inspector.get_columns("trials")}
        assert "ix_trials_worker" in {ix["name"] for ix in inspector.get_indexes("trials")}
        old: Optional[JobRecord] = db.get_job(job_id)
        assert old is not None and old.owner is None and old.trials_done == 8
        assert [t.worker for t in db.job_trials(job_id)[0]] == [None]
        claimed = db.claim_job("host-a:1:aa", LEASE)
        assert claimed is not None and claimed.id == job_id and claimed.owner == "host-a:1:aa"
        assert claimed.started_at == old.started_at
    finally:
        db.dispose()


def test_writes_under_a_lost_lease_are_refused(db: Database, make) -> None:
    """An owner that lost its job without knowing (suspended past its lease) writes nothing
    for it: trials, progress and re-timed costs are fenced by the owner in the transaction."""
    from autotune.db.lease import LeaseLost, OwnedStore

    w, t = make.workload(), make.target()
    job = _job(db, make, owner="elsewhere:4242:aa", lease_s=LEASE)
    old = OwnedStore(db, job.id, "elsewhere:4242:aa")
    assert old.add_trials(w, t, job.id, [(make.config(1), make.ok(1e-3))], 100) == 1
    assert old.update_job_progress(job.id, trials_done=1, best_gflops=0.1)
    assert [r.config_index for r in old.trials_for(w, t)] == [1]  # reads go through

    taken = db.claim_job("host-b:2:bb", LEASE, now=_later(LEASE + 2))
    assert taken is not None and taken.id == job.id
    with pytest.raises(LeaseLost, match="host-b:2:bb"):
        old.add_trials(w, t, job.id, [(make.config(2), make.ok(1e-3))], 100)
    with pytest.raises(LeaseLost):
        old.update_job_progress(job.id, trials_done=7, best_gflops=9.0)
    with pytest.raises(LeaseLost):
        old.record_retiming(w, t, [Retimed(1, 1e-3, 5e-4, (5e-4,))], accepted=True)
    with pytest.raises(LeaseLost):
        old.set_job_model_scores(job.id, batch=0, trials=1, scores={"1": 0.5})
    assert db.job_model_scores(job.id) is None
    assert [r.config_index for r in db.trials_for(w, t)] == [1]
    assert db.get_job(job.id).trials_done == 1
    assert db.trials_for(w, t)[0].cost == pytest.approx(1e-3)
    new = OwnedStore(db, job.id, "host-b:2:bb")
    assert new.add_trials(w, t, job.id, [(make.config(2), make.ok(1e-3))], 100) == 1


def test_nothing_is_written_for_a_job_after_its_cancel(db: Database, make) -> None:
    """The owner of a cancelled job still holds it until it lets go, but every write it
    tries after the cancel committed is refused (`JobEnded`), in the write's transaction."""
    from autotune.db.lease import JobEnded, LeaseLost, OwnedStore
    from autotune.search.store import JobStopped

    w, t = make.workload(), make.target()
    owner = new_owner()
    job = _job(db, make, owner=owner, lease_s=LEASE)
    store = OwnedStore(db, job.id, owner)
    assert store.add_trials(w, t, job.id, [(make.config(1), make.ok(1e-3))], 100) == 1
    assert db.set_job_state(job.id, "cancelled", from_states=["queued", "running"])
    writes = [
        lambda: store.add_trials(w, t, job.id, [(make.config(2), make.ok(1e-3))], 100),
        lambda: store.update_job_progress(job.id, trials_done=2, best_gflops=9.0),
        lambda: store.record_retiming(w, t, [Retimed(1, 1e-3, 5e-4, (5e-4,))], accepted=True),
        lambda: store.set_job_model_scores(job.id, batch=0, trials=1, scores={"1": 0.5})]
    for write in writes:
        with pytest.raises(JobEnded, match="cancelled") as err:
            write()
        assert isinstance(err.value, LeaseLost) and isinstance(err.value, JobStopped)
    assert [r.config_index for r in db.trials_for(w, t)] == [1]
    assert db.trials_for(w, t)[0].retimed_cost is None
    after = db.get_job(job.id)
    assert (after.state, after.owner, after.trials_done) == ("cancelled", owner, 0)
    assert db.job_model_scores(job.id) is None
    assert db.release_job(job.id, owner, state="done").state == "cancelled"


def test_a_keeper_sees_a_cancel_within_a_second_not_a_renewal(db: Database, make) -> None:
    owner = new_owner()
    job = _job(db, make, owner=owner, lease_s=LEASE)
    keeper = LeaseKeeper(db, owner, LEASE)  # renews every 10 s
    keeper.add(job.id)
    keeper.start()
    try:
        time.sleep(0.2)
        db.set_job_state(job.id, "cancelled")
        t0 = time.monotonic()
        assert _wait(lambda: keeper.stopping(job.id), 5) == "cancelled"
        assert time.monotonic() - t0 < 2.5
    finally:
        keeper.stop()
