"""`GET /workers`: who measures, and how busy each target is."""
from __future__ import annotations

import socket
import time
from typing import Any, Literal, Optional

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field

from autotune.measure.provenance import device_name
from autotune.service.cache import cached_json
from autotune.service.deps import CacheDep, DbDep, ReadAccess

router = APIRouter(tags=["workers"])


class WorkerPublic(BaseModel):
    """One measurement worker: a Ray actor of one device, or this service's own host."""

    worker: str = Field(description="worker id (host, token and device), or local:<host>")
    host: str
    target: str = Field(description="the target key it measures")
    device: str = Field(description="CPU model, or GPU name and uuid")
    state: Literal["starting", "idle", "busy", "dead"]
    job: Optional[int] = Field(default=None, description="the job it measures now")
    trials: int = Field(default=0, description="trials recorded as measured by it on this "
                                               "target, all jobs (the trials table's worker)")
    failures: int = Field(default=0, description="of which failed")
    last_seen: Optional[float] = Field(default=None, description="Unix time of its last status")
    reason: Optional[str] = Field(default=None, description="why it is dead")


class TargetLoad(BaseModel):
    """This service's work for one target: candidates waiting, being measured; idle workers."""

    target: str
    queued: int
    in_flight: int
    free: int


class WorkersPage(BaseModel):
    cluster: Optional[str] = Field(description="the Ray address; null: this host measures")
    error: Optional[str] = Field(default=None, description="why the cluster could not be read")
    workers: list[WorkerPublic]
    targets: list[TargetLoad]


@router.get("/workers", response_model=WorkersPage, dependencies=[ReadAccess])
async def list_workers(request: Request, db: DbDep, cache: CacheDep) -> Response:
    """The measurement workers (live first, then recently dead) and each target's load.

    Each worker's trials and failures are counted in the trials table (as
    ``/jobs/{id}/workers`` counts them per job); ``state`` and ``job`` are what it does now
    (as of at most a second ago)."""
    return await cached_json(cache, ("cluster-workers",), lambda: _page(request, db))


def _page(request: Request, db: Any) -> WorkersPage:
    state = request.app.state
    registry, pool = state.registry, state.executors
    executors = pool.executors()
    if registry is None:
        workers = [_local(key, ex) for key, ex in sorted(executors.items())]
        targets = [TargetLoad(target=key, queued=0, in_flight=0,
                              free=0 if ex.lock.locked() else 1)
                   for key, ex in sorted(executors.items())]
        return WorkersPage(cluster=None, workers=_counted(db, workers), targets=targets)
    targets = [TargetLoad(target=key, **ex.stats()) for key, ex in sorted(executors.items())]
    workers = [WorkerPublic(**_public(w)) for w in registry.snapshot()]
    return WorkersPage(cluster=state.settings.ray_address, error=registry.error or None,
                       workers=_counted(db, workers), targets=targets)


def _counted(db: Any, workers: list[WorkerPublic]) -> list[WorkerPublic]:
    """``workers`` with their trials and failures from the trials table."""
    pairs = [(w.worker, w.target) for w in workers]
    counts = db.worker_counts(pairs)
    return [w.model_copy(update=dict(zip(("trials", "failures"), counts.get(pair, (0, 0)))))
            for w, pair in zip(workers, pairs)]


def _public(view: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in view.items() if k in WorkerPublic.model_fields}


def _local(key: str, executor: Any) -> WorkerPublic:
    """This host's executor of a target, shown as a worker."""
    inner = executor.inner
    host = socket.gethostname()
    target = getattr(inner, "target", None)
    # the target's key, without the measure options a pool key may add
    return WorkerPublic(worker=f"local:{host}", host=host,
                        target=target.key if target is not None else key,
                        device=device_name(target) if target is not None else "",
                        state="busy" if executor.job is not None else "idle",
                        job=executor.job,  # busy only with a job: a lock held for none is idle
                        last_seen=time.time())  # this service's own host: seen as it answers
