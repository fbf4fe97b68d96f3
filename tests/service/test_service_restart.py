"""Crash recovery: SIGKILL the server mid-job; the restarted server finishes the budget with no
measured trial lost and none measured twice. It takes the job over at once: the killed owner
was a process of this host, so its lease (far longer than the test) need not run out."""
from __future__ import annotations

import pytest

from autotune.db import Database
from tests.service.service_helpers import SMALL_MATMUL, create_key, events, wait_for

pytestmark = pytest.mark.timeout(400)

BUDGET = 48


def test_killed_server_resumes_job_without_losing_or_repeating_trials(make_server) -> None:
    server = make_server(AUTOTUNE_JOB_LEASE_S="3600")
    key = create_key(server.db_url)
    server.start()
    with server.client(key) as c:
        job = c.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": BUDGET,
                                           "tuner": "ga", "seed": 1}).json()

        def first_batch_recorded():
            body = c.get(f"/api/v1/jobs/{job['id']}").json()
            return body if body["trials_done"] >= 1 and body["state"] == "running" else None

        wait_for(first_batch_recorded, timeout=120, what="the first batch")
    db = Database(server.db_url)
    try:
        server.kill()
        before, _ = db.job_trials(job["id"], limit=BUDGET)
        assert 0 < len(before) < BUDGET, "the job should be stopped mid-way"
        left = db.get_job(job["id"])
        assert left.state == "running" and left.owner is not None

        server.start()
        with server.client() as c:
            stream = list(events(c, job["id"]))
            assert stream[-1][0] == "end" and stream[-1][2]["state"] == "done"
            sent = [t["id"] for e, _, d in stream if e == "batch" for t in d["trials"]]
            assert len(sent) == len(set(sent)) == BUDGET
            final = c.get(f"/api/v1/jobs/{job['id']}").json()
        assert final["state"] == "done" and final["trials_done"] == BUDGET

        after, total = db.job_trials(job["id"], limit=10 * BUDGET)
        assert total == db.job_trial_count(job["id"]) == BUDGET
        assert len({t.config_index for t in after}) == BUDGET  # nothing measured twice
        kept = {t.id: t.config_index for t in after}
        assert all(kept.get(t.id) == t.config_index for t in before)  # nothing lost
        # No trial of this workload was recorded outside the job either.
        assert len(db.trials_for(after[0].workload_key, after[0].target_key)) == BUDGET
    finally:
        db.dispose()
