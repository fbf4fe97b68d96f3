"""Two real `autotune serve` processes on one PostgreSQL database: a job runs in exactly one of
them; when that one is SIGKILLed the other takes the job over and finishes its budget with no
config measured twice; when it is suspended (SIGSTOP) the other takes over once the lease has
expired, and the suspended one, resumed, writes nothing more for the job; a cancel sent to
the service that does not run a job stops it.

(That a lease running out lets a process of another host take over is tested at the database
level, in tests/db/test_db_leases.py: here every owner is a process of this host.)
"""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from autotune.db import Database
from tests.service.service_helpers import SMALL_MATMUL, Server, create_key, events, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]

BUDGET = 48
LEASES = {"AUTOTUNE_JOB_LEASE_S": "3"}


@pytest.fixture
def services(fresh_pg_url: str, tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    """Two services on one empty PostgreSQL database, each with its own log directory and
    its own host CPU lock (TMPDIR), as on two hosts: a suspended one must not hold up the
    other's timing."""
    servers = []
    for name in ("a", "b"):
        (tmp_path / name / "tmp").mkdir(parents=True)
        env = {**LEASES, "TMPDIR": str(tmp_path / name / "tmp")}
        servers.append(Server(fresh_pg_url, tmp_path / name, env))
    try:
        for server in servers:
            server.start()
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.stop()


def _pid(owner: str) -> int:
    return int(owner.rsplit(":", 2)[1])


def _job(server: Server, job_id: int) -> dict[str, Any]:
    with server.client() as c:
        return c.get(f"/api/v1/jobs/{job_id}").json()


def _running(server: Server, job_id: int) -> dict[str, Any]:
    """The job once a service runs it and has recorded a batch."""
    def check() -> Any:
        job = _job(server, job_id)
        return job if job["owner"] and job["trials_done"] >= 1 else None
    return wait_for(check, timeout=120, what=f"job {job_id} to run")


def _split(services: tuple[Server, Server], owner: str) -> tuple[Server, Server]:
    """(the service running a job, the other one), by the owner's pid."""
    a, b = services
    assert _pid(owner) in (a.proc.pid, b.proc.pid), owner
    return (a, b) if _pid(owner) == a.proc.pid else (b, a)


def _follow(server: Server, job_id: int) -> tuple[threading.Thread, list[Any]]:
    """Read the job's event stream from ``server`` in a thread; (thread, events so far)."""
    stream: list[Any] = []

    def read() -> None:
        with server.client() as c:
            stream.extend(events(c, job_id, timeout=240))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread, stream


def test_one_service_runs_a_job_and_the_other_takes_over_when_it_dies(services) -> None:
    key = create_key(services[0].db_url)
    with services[0].client(key) as c:
        job = c.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": BUDGET,
                                           "tuner": "ga", "seed": 1}).json()
    owner = wait_for(lambda: _job(services[0], job["id"])["owner"], timeout=60,
                     what="a service to claim the job")
    runner, other = _split(services, owner)
    with runner.client() as c:
        assert c.get("/api/v1/health").json()["owner"] == owner
    thread, stream = _follow(other, job["id"])  # a stream served by the service not running it

    def first_batch() -> Any:
        seen = _job(other, job["id"])
        assert seen["owner"] == owner  # while both live, the owner never changes
        return seen if seen["trials_done"] >= 1 else None

    # Killed right after its first batch: the whole job takes a few seconds.
    wait_for(first_batch, timeout=120, interval=0.1, what="the first batch")
    db = Database(runner.db_url)
    try:
        runner.kill()
        before, _ = db.job_trials(job["id"], limit=BUDGET)
        assert 0 < len(before) < BUDGET, "the job should be stopped mid-way"
        with other.client() as c:
            successor = c.get("/api/v1/health").json()["owner"]
        # The dead owner was a process of this host: the other takes the job over at once.
        wait_for(lambda: _job(other, job["id"])["owner"] == successor, timeout=30,
                 what="the other service to take the job over")
        final = wait_for(lambda: (lambda j: j if j["state"] == "done" else None)(
            _job(other, job["id"])), timeout=180, what="the job to finish")
        assert final["trials_done"] == BUDGET and final["owner"] is None

        thread.join(30)
        assert not thread.is_alive(), "the stream should end with the job"
        assert stream[-1][0] == "end" and stream[-1][2]["state"] == "done"
        sent = [t["id"] for e, _, d in stream if e == "batch" for t in d["trials"]]
        assert len(sent) == len(set(sent)) == BUDGET

        after, total = db.job_trials(job["id"], limit=10 * BUDGET)
        assert total == BUDGET and len({t.config_index for t in after}) == BUDGET
        kept = {t.id: t.config_index for t in after}
        assert all(kept.get(t.id) == t.config_index for t in before)  # nothing lost
        assert len(db.trials_for(after[0].workload_key, after[0].target_key)) == BUDGET
    finally:
        db.dispose()


def test_a_suspended_owner_loses_the_job_when_its_lease_expires(services) -> None:
    """A hung owner's process still exists, so only the lease frees its job. Resumed after
    the job has finished elsewhere, it writes nothing for it: its batch in flight is refused
    (fenced by owner), so neither the trials nor the job's count change."""
    key = create_key(services[0].db_url)
    with services[0].client(key) as c:
        job = c.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": BUDGET,
                                           "tuner": "random", "seed": 9}).json()
    first = _running(services[0], job["id"])
    runner, other = _split(services, first["owner"])
    os.kill(runner.proc.pid, signal.SIGSTOP)
    try:
        # The lease (3 s, renewed every second) outlives the first second of the freeze.
        time.sleep(1.0)
        assert _job(other, job["id"])["owner"] == first["owner"]
        final = wait_for(lambda: (lambda j: j if j["state"] == "done" else None)(
            _job(other, job["id"])), timeout=180, what="the other service to finish the job")
        assert final["trials_done"] == BUDGET and final["owner"] is None
    finally:
        os.kill(runner.proc.pid, signal.SIGCONT)
    with runner.client() as c:  # the resumed service lives on: healthy again once its
        # database probe, frozen too, has read again (until then its reading is stale: 503)
        wait_for(lambda: c.get("/api/v1/health").status_code == 200, timeout=10,
                 what="the resumed service's health")
    time.sleep(3.0)  # its batch in flight ends and tries to write
    db = Database(runner.db_url)
    try:
        trials, total = db.job_trials(job["id"], limit=10 * BUDGET)
        assert total == BUDGET and len({t.config_index for t in trials}) == BUDGET
        after = db.get_job(job["id"])
        assert (after.state, after.trials_done, after.owner) == ("done", BUDGET, None)
    finally:
        db.dispose()


def test_a_cancel_sent_to_the_service_not_running_a_job_stops_it(services) -> None:
    key = create_key(services[0].db_url)
    workload = {"op": "matmul", "params": {"M": 64, "N": 64, "K": 32}}
    with services[0].client(key) as c:
        job = c.post("/api/v1/jobs", json={"workload": workload, "trials": 2000,
                                           "tuner": "random"}).json()
    first = _running(services[0], job["id"])
    runner, other = _split(services, first["owner"])
    thread, stream = _follow(other, job["id"])

    with other.client(key) as c:
        assert c.post(f"/api/v1/jobs/{job['id']}/cancel").json()["state"] == "cancelled"
    # The runner's heartbeat reads the cancel; the job stops after its batch and is released.
    released = wait_for(lambda: (lambda j: j if j["owner"] is None else None)(
        _job(runner, job["id"])), timeout=20, what="the runner to release the job")
    assert released["state"] == "cancelled"
    db = Database(runner.db_url)
    try:
        count = db.job_trial_count(job["id"])
        time.sleep(2.5)
        assert db.job_trial_count(job["id"]) == count < 2000  # it stopped
    finally:
        db.dispose()
    thread.join(30)
    assert not thread.is_alive() and stream[-1][0] == "end"
    assert stream[-1][2]["state"] == "cancelled"
    with runner.client() as c:  # the runner lives on
        assert c.get("/api/v1/health").status_code == 200
