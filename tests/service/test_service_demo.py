"""`autotune serve --demo` (what `make run` starts): the dashboard with a small CNN tuned beside
it as a model run, its jobs and worker visible live, stopped with Ctrl-C; a small
``--demo-trials`` keeps the run short."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from autotune.db import Database
from autotune.service.demo import DEMO_NAME
from tests.service.service_helpers import FAST_MEASURE, free_port, wait_for

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]
TASKS = 8  # the demo model's distinct layers
TRIALS = TASKS  # one trial each


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _serve(tmp_path: Path, port: int, log: Path, trials: int = TRIALS,
           sigint_ignored: bool = False) -> subprocess.Popen:
    """``autotune serve --demo``; ``sigint_ignored``: started as a shell without job control
    starts ``cmd &``, SIGINT ignored (the service and what it starts inherit that)."""
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.cli", "serve", "--demo", "--demo-trials", str(trials),
         "--db", f"sqlite:///{tmp_path / 'autotune.db'}", "--port", str(port)],
        cwd=tmp_path, env={**os.environ, **FAST_MEASURE}, stdout=subprocess.DEVNULL,
        stderr=log.open("w"), start_new_session=True,
        preexec_fn=_ignore_sigint if sigint_ignored else None)


def _items(url: str) -> list[dict]:
    """The ``items`` of a list endpoint, or none while the service does not answer yet."""
    try:
        return httpx.get(url, timeout=5).json()["items"]
    except (httpx.HTTPError, ValueError, KeyError):
        return []


def _interrupt(proc: subprocess.Popen) -> int:
    """Ctrl-C, as a terminal sends it: SIGINT to the whole foreground process group."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_the_demo_tunes_a_model_run_to_watch(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    proc = _serve(tmp_path, port, log)
    base = f"http://127.0.0.1:{port}/api/v1"
    try:
        def run() -> dict:
            items = _items(f"{base}/model-runs")
            return items[0] if items else {}

        wait_for(lambda: run().get("state") == "running", 120, what="the demo's model run")
        assert run()["name"] == DEMO_NAME and run()["budget"] == TRIALS
        assert run()["tasks"] == TASKS
        wait_for(lambda: "demo model run is done" in log.read_text(), 300,
                 what="the demo run to finish")
        assert run()["state"] == "done"
        jobs = httpx.get(f"{base}/jobs", params={"limit": 50}, timeout=5).json()["items"]
        assert len(jobs) == TASKS and all(j["trials_done"] >= 1 for j in jobs), jobs
        assert all(j["state"] == "done" for j in jobs)
        detail = httpx.get(f"{base}/model-runs/{run()['id']}", timeout=5).json()
        assert detail["estimated_latency_s"] > 0
        workers = httpx.get(f"{base}/jobs/{jobs[0]['id']}/workers", timeout=5).json()["items"]
        assert sum(w["trials"] for w in workers) == jobs[0]["trials_done"]
    finally:
        code = _interrupt(proc)
    text = log.read_text()
    assert code == 0, text
    assert f"dashboard at http://127.0.0.1:{port}/" in text
    assert "press Ctrl-C to stop" in text, text
    demo_log = (tmp_path / "autotune-demo.log").read_text()
    assert demo_log.count(f"model run 1: {TASKS}/{TASKS} trials") == 1, demo_log

    # Served again over the same database: the finished run is not started again.
    proc = _serve(tmp_path, port := free_port(), log)
    try:
        wait_for(lambda: "press Ctrl-C" in log.read_text(), 60, what="the second start")
        time.sleep(2)
        runs = httpx.get(f"http://127.0.0.1:{port}/api/v1/model-runs", timeout=5).json()
        assert runs["total"] == 1 and runs["items"][0]["state"] == "done"
    finally:
        assert _interrupt(proc) == 0
    assert "is done; see" in log.read_text()


@pytest.mark.serial
def test_ctrl_c_stops_the_demo_run_with_the_service(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    # a budget the run cannot finish before the interrupt (a trial a task finished, once,
    # between seeing its last job run and the interrupt arriving)
    # SIGINT ignored as a background job inherits it: the service still stops on it, and
    # the demo run it started still takes the SIGINT the service stops it with
    proc = _serve(tmp_path, port, log, trials=200 * TASKS, sigint_ignored=True)
    base = f"http://127.0.0.1:{port}/api/v1"
    try:
        def running_jobs() -> int:
            return sum(j["state"] == "running" for j in _items(f"{base}/jobs"))

        wait_for(lambda: running_jobs() > 0, 120, what="a job of the demo run")
    finally:
        code = _interrupt(proc)
    assert code == 0, log.read_text()
    # The run and its job ended cancelled, recorded by the child before it exited.
    db = Database(f"sqlite:///{tmp_path / 'autotune.db'}")
    try:
        states = {r.state for r in db.list_runs()[0]}
        jobs = {j.state for j in db.list_jobs(limit=50)[0]}
    finally:
        db.dispose()
    assert states == {"cancelled"} and "running" not in jobs, (states, jobs)
