"""Reads under load: many clients of one job's page, or of its event stream, cost one
database read per change (the service's `ResponseCache`), and a change shows at once."""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable

from fastapi.testclient import TestClient

from autotune import config_space
from autotune.db import Database
from autotune.db.lease import new_owner
from autotune.measure import MeasureResult
from autotune.ops import Workload
from autotune.service.cache import ResponseCache
from autotune.service.events import job_events
from autotune.service.executors import ExecutorPool
from autotune.service.main import create_app
from autotune.service.manager import JobManager
from autotune.settings import Settings
from autotune.target import Target
from tests.service.service_helpers import SMALL_MATMUL


def _counted(obj: Any, name: str) -> list[int]:
    """Count the calls of ``obj``'s method ``name`` (the real one still answers them)."""
    calls: list[int] = []
    real: Callable[..., Any] = getattr(obj, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    setattr(obj, name, counting)
    return calls


def test_fifty_clients_of_a_job_cost_one_read_and_a_cancel_shows_at_once(tmp_path: Path
                                                                         ) -> None:
    settings = Settings(db_url=f"sqlite:///{tmp_path / 'reads.db'}", max_concurrent_jobs=1)
    app = create_app(settings, tune_fn=lambda *args, **kwargs: None,
                     executor_factory=lambda target, measure: object())
    with TestClient(app, base_url="http://localhost") as client:
        db: Database = app.state.db
        owner = new_owner()  # alive: the service never claims the job
        job = db.create_job(workload=Workload.from_dict(SMALL_MATMUL), target=Target("llvm"),
                            tuner="random", trials=8, owner=owner, lease_s=3600, options={})
        reads = _counted(db, "get_job")
        with ThreadPoolExecutor(50) as pool:
            answers = list(pool.map(lambda _: client.get(f"/api/v1/jobs/{job.id}"), range(50)))
        assert {a.status_code for a in answers} == {200}
        assert {a.json()["state"] for a in answers} == {"running"}
        assert len(reads) <= 2, len(reads)  # one read, or two when a wave straddles it
        key = {"Authorization": f"Bearer {db.create_api_key('tests')}"}
        assert client.post(f"/api/v1/jobs/{job.id}/cancel", headers=key).json()["state"] == \
            "cancelled"
        assert client.get(f"/api/v1/jobs/{job.id}").json()["state"] == "cancelled"


def test_twenty_streams_of_a_job_share_each_read(tmp_path: Path) -> None:
    """Each batch wakes every stream; all but the first find its reads made."""
    db = Database.open(f"sqlite:///{tmp_path / 'streams.db'}")
    manager = JobManager(db, ExecutorPool(lambda target, measure: object()), workers=1)
    cache = ResponseCache(lambda: manager.notifier.version, ttl=60.0)
    wl, target = Workload.from_dict(SMALL_MATMUL), Target("llvm")
    job = db.create_job(workload=wl, target=target, tuner="random", trials=8,
                        owner=new_owner(), lease_s=3600, options={})
    rows, since = _counted(db, "get_job"), _counted(db, "job_trials_since")

    async def follow() -> None:
        streams = [job_events(db, manager, cache, job.id) for _ in range(20)]
        for stream in streams:  # the retry hint, then the job's state
            assert (await anext(stream)).startswith("retry")
            assert "event: state" in await anext(stream)
        assert (len(rows), len(since)) == (1, 1)
        space = config_space(wl, target)
        db.add_trials(wl, target, job.id, [(space.get(i), MeasureResult(costs=(1e-3,)))
                                           for i in range(4)], wl.flops())
        manager.notifier.publish(job.id)
        batches = await asyncio.gather(*(anext(s) for s in streams))
        assert all("event: batch" in b for b in batches)
        assert (len(rows), len(since)) == (2, 2)
        for stream in streams:
            await stream.aclose()

    try:
        asyncio.run(follow())
    finally:
        manager.notifier.close()
        db.dispose()
