"""Cancel stops the work: a job cancelled while it measures, and one cancelled in its final
re-timing window, stop within seconds on SQLite and on PostgreSQL: the measuring process
busy with them is killed, the job is released, and nothing is written for it after the
cancel has returned (the writes are fenced in their transactions)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from autotune.db import Database
from autotune.ops import Workload
from tests.service.service_helpers import SMALL_MATMUL, Server, create_key, wait_for

pytestmark = pytest.mark.timeout(300)

# Each timing of a config lasts about 8 s (its repeats stop at 80% of the run timeout, and
# the timeout leaves room for a loaded host).
SLOW = {"repeat": 100, "min_repeat_ms": 200, "run_timeout": 10}
STOPPED_WITHIN_S = 5.0


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def service(request: pytest.FixtureRequest, make_server: Any,
            tmp_path: Path) -> Iterator[tuple[Server, str, Database]]:
    url = (f"sqlite:///{tmp_path / 'cancel.db'}" if request.param == "sqlite"
           else request.getfixturevalue("fresh_pg_url"))
    Database.open(url).dispose()
    server = make_server(url)
    key = create_key(url)
    server.start()
    db = Database(url)
    yield server, key, db
    db.dispose()


def _children(pid: int) -> list[int]:
    """Every live descendant of ``pid``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        kids = [child for child, ppid in parents.items() if ppid == parent]
        found += kids
        todo += kids
    return found


def _cpu_s(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _busy(pid: int, window_s: float = 0.6) -> dict[int, float]:
    """The descendants of ``pid`` that computed over ``window_s``: their CPU seconds."""
    kids = _children(pid)
    before = {k: _cpu_s(k) for k in kids}
    time.sleep(window_s)
    used = {k: _cpu_s(k) - before[k] for k in kids}
    return {k: cpu for k, cpu in used.items() if cpu > 0.05}


def _records(db: Database, job: dict[str, Any]) -> Any:
    """What the database holds for the job: its row's progress and every record of its
    workload on its target (a re-timing window writes to all of them)."""
    row = db.get_job(job["id"])
    trials = db.trials_for(Workload.from_dict(job["workload"]).key, job["target"])
    return (row.trials_done, row.best_gflops, row.state,
            sorted((t.config_index, t.cost, t.retimed_cost, t.error,
                    json.dumps(t.extra, sort_keys=True)) for t in trials))


def _cancel_while_busy(server: Server, key: str, db: Database, job: dict[str, Any]) -> Any:
    """Cancel ``job`` while measuring processes compute for it; check that it stops: released
    and every process of the service idle within STOPPED_WITHIN_S (uncancelled, the job
    would measure for tens of seconds more), nothing written after the cancel returned."""
    wait_for(lambda: _busy(server.proc.pid), 60, 0, what="a process measuring for the job")
    with server.client(key) as c:
        answer = c.post(f"/api/v1/jobs/{job['id']}/cancel")
        cancelled_at = time.monotonic()
        assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
        written = _records(db, job)
        released = wait_for(lambda: (lambda j: j if j["owner"] is None else None)(
            c.get(f"/api/v1/jobs/{job['id']}").json()), STOPPED_WITHIN_S, 0.05,
            what="the cancelled job released")
    assert released["state"] == "cancelled"
    time.sleep(max(STOPPED_WITHIN_S - 1.0 - (time.monotonic() - cancelled_at), 0.0))
    assert _busy(server.proc.pid, 1.0) == {}, "a process still computes for the job"
    assert _records(db, job) == written  # nothing written after the cancel returned
    return written


def test_cancel_stops_a_measuring_job_and_one_in_its_retiming_window(service) -> None:
    server, key, db = service
    with server.client(key) as c:
        measuring = c.post("/api/v1/jobs", json={
            "workload": SMALL_MATMUL, "trials": 8, "tuner": "random",
            "measure_options": SLOW}).json()
        wait_for(lambda: c.get(f"/api/v1/jobs/{measuring['id']}").json()["state"] ==
                 "running", 60, what="the first job running")
    _cancel_while_busy(server, key, db, measuring)

    with server.client(key) as c:  # two trials, then a window re-times both, 3 rounds each
        retiming = c.post("/api/v1/jobs", json={
            "workload": {**SMALL_MATMUL, "params": {"M": 48, "N": 64, "K": 64}},
            "trials": 2, "tuner": "random", "measure_options": SLOW}).json()
        wait_for(lambda: (lambda j: j["trials_done"] == 2 and j["best_gflops"])(
            c.get(f"/api/v1/jobs/{retiming['id']}").json()), 120,
            what="the second job's trials measured, one valid at least")
        time.sleep(1.0)  # into its window (3 rounds of 2 members: about 50 s)
        assert c.get(f"/api/v1/jobs/{retiming['id']}").json()["state"] == "running"
    _, _, _, records = _cancel_while_busy(server, key, db, retiming)
    assert len(records) == 2 and not any("retime" in json.loads(r[4]) for r in records)
