"""`autotune serve --ray-address`: a job measures on the cluster's workers, waits (queued,
with the reason) while its target has none, and the API shows who measures what."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.service.service_helpers import Server, create_key, wait_for

pytestmark = pytest.mark.timeout(300)

SPEC = "llvm -mcpu=x86-64-v3 -cores=105"
BUDGET = 24


@pytest.fixture
def server(head: Any, tmp_path: Path) -> Any:
    started = Server(f"sqlite:///{tmp_path / 'autotune.db'}", tmp_path,
                     {"AUTOTUNE_RAY_ADDRESS": head.address})
    yield started
    started.stop()


def test_job_waits_for_a_worker_then_measures_on_the_cluster(server: Any, workers: Any) -> None:
    from autotune.target import Target

    key = create_key(server.db_url)
    server.start()
    with server.client(key) as c:
        job = c.post("/api/v1/jobs", json={
            "workload": {"op": "matmul", "params": {"M": 64, "N": 64, "K": 64}},
            "target": SPEC, "trials": BUDGET, "tuner": "random"}).json()
        url = f"/api/v1/jobs/{job['id']}"
        waiting = wait_for(lambda: (lambda j: j if j["waiting"] else None)(c.get(url).json()),
                           timeout=30, what="the job to say why it waits")
        assert waiting["state"] == "queued"
        assert "no live measurement worker" in waiting["waiting"]
        assert Target(SPEC).key in waiting["waiting"]

        (proc,) = workers("--synthetic", "0.02", "--target", SPEC)
        done = wait_for(lambda: (lambda j: j if j["state"] == "done" else None)(c.get(url).json()),
                        timeout=120, what="the job to finish")
        assert done["trials_done"] == BUDGET and done["waiting"] is None

        # At once, not on some later poll of the workers: the job has ended, so its worker
        # is idle, and its counts are the trials table's (the re-timing's re-runs are no
        # trials), as the job's own page counts them.
        listing = c.get("/api/v1/workers").json()
        by = c.get(f"{url}/workers").json()["items"]
        assert [(w["worker"], w["trials"]) for w in by] == [(proc.ids()[0], BUDGET)]
        (mine,) = [w for w in listing["workers"] if w["worker"] == proc.ids()[0]]
        assert (mine["state"], mine["job"]) == ("idle", None)
        assert (mine["trials"], mine["failures"]) == (by[0]["trials"], by[0]["failed"])
        assert listing["cluster"] == server.env["AUTOTUNE_RAY_ADDRESS"]
        assert mine["target"] == Target(SPEC).key
        assert any(t["target"] == Target(SPEC).key for t in listing["targets"])


def test_cancel_reaches_a_job_waiting_for_a_worker(server: Any) -> None:
    key = create_key(server.db_url)
    server.start()
    with server.client(key) as c:
        job = c.post("/api/v1/jobs", json={
            "workload": {"op": "matmul", "params": {"M": 32, "N": 32, "K": 32}},
            "target": "llvm -mcpu=x86-64-v2 -cores=107", "trials": 8,
            "tuner": "random"}).json()
        url = f"/api/v1/jobs/{job['id']}"
        wait_for(lambda: c.get(url).json()["waiting"], timeout=30,
                 what="the job to wait for a worker")
        assert c.post(f"{url}/cancel").json()["state"] == "cancelled"
        # The process running it lets go of it: no worker will ever come for this target.
        ended = wait_for(lambda: (lambda j: j if j["owner"] is None else None)(c.get(url).json()),
                         timeout=20, what="the waiting job to let go")
        assert ended["state"] == "cancelled" and ended["trials_done"] == 0
