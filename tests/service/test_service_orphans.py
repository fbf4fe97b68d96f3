"""Children die with the service: after a SIGKILL of the server process alone (not its
process group), none of its builders, runners or other children is left, and a restarted
server finishes the job with no trial lost or measured twice."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from autotune.db import Database
from tests.service.service_helpers import SMALL_MATMUL, create_key, events, wait_for

pytestmark = pytest.mark.timeout(300)

BUDGET = 16
REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _descendants(root: int) -> set[int]:
    """Every process below ``root``, from /proc (no psutil needed)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def _wait_gone(pids: set[int], timeout: float) -> set[int]:
    deadline = time.monotonic() + timeout
    left = {pid for pid in pids if _alive(pid)}
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {pid for pid in left if _alive(pid)}
    return left


def _reap(pids: set[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_sigkilled_service_leaves_no_process_and_loses_no_trial(make_server) -> None:
    server = make_server(AUTOTUNE_JOB_LEASE_S="3600")
    key = create_key(server.db_url)
    server.start()
    with server.client(key) as c:
        job = c.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": BUDGET,
                                           "tuner": "random", "seed": 3}).json()

        def mid_batch():
            body = c.get(f"/api/v1/jobs/{job['id']}").json()
            return body["trials_done"] >= 1 and body["state"] == "running"

        wait_for(mid_batch, timeout=120, what="the first batch")
    assert server.proc is not None
    children = _descendants(server.proc.pid)
    assert children, "the server should have build workers and a runner by now"
    os.kill(server.proc.pid, signal.SIGKILL)  # the server alone, not its process group
    server.proc.wait(10)
    left = _wait_gone(children, timeout=5.0)
    _reap(left)
    assert not left, f"children outlived the SIGKILLed server: {sorted(left)}"

    db = Database(server.db_url)
    try:
        before, _ = db.job_trials(job["id"], limit=BUDGET)
        assert 0 < len(before) < BUDGET
        server.start()
        with server.client() as c:
            stream = list(events(c, job["id"]))
        assert stream[-1][0] == "end" and stream[-1][2]["state"] == "done"
        after, total = db.job_trials(job["id"], limit=10 * BUDGET)
        assert total == BUDGET and len({t.config_index for t in after}) == BUDGET
        kept = {t.id: t.config_index for t in after}
        assert all(kept.get(t.id) == t.config_index for t in before)  # nothing lost
    finally:
        db.dispose()


def hold_gil(conn: Connection) -> None:
    """A child stuck in native code that keeps the GIL (a PyDLL call never releases it), so
    that no Python thread of it, an orphan watch included, runs for a minute."""
    conn.send(("ready", os.getpid()))
    ctypes.PyDLL(None).sleep(60)


PARENT = f"""
import sys, threading
sys.path.insert(0, {str(REPO)!r})
from autotune.process.child import ChildProcess
from tests.service.test_service_orphans import hold_gil

child = ChildProcess(hold_gil, (), "gil-holder")
# Spawned from a thread that ends at once, as job threads and the GPU build feed do.
thread = threading.Thread(target=child.start)
thread.start()
thread.join()
print(child.recv(60)[1], flush=True)
threading.Event().wait()
"""


def test_a_child_holding_the_gil_dies_with_its_parent() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(1.0)
        assert _alive(child), "the child must outlive the thread that spawned it"
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        left = _wait_gone({child}, timeout=3.0)
        _reap(left)
        assert not left, "the child outlived its SIGKILLed parent"
    finally:
        try:
            os.killpg(parent.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
