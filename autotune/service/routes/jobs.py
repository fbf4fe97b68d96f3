"""Job routes: submit, list, get, cancel, trials, workers, top configs, curves, events."""
from __future__ import annotations

from typing import Annotated, Literal, Optional

from anyio import to_thread
from fastapi import APIRouter, Header, HTTPException, Query, status
from fastapi.responses import Response, StreamingResponse

from autotune.db import JobRecord
from autotune.service import queries
from autotune.service.cache import json_body, json_response
from autotune.service.deps import (CacheDep, DbDep, ManagerDep, ReadAccess, SourcesDep,
                                   WriteAccess)
from autotune.service.events import job_events
from autotune.service.schemas import (CurvePublic, CurvesPage, ErrorKindName, JobCreate,
                                      JobPublic, JobsPage, JobState, JobWorkerPublic,
                                      JobWorkersPage, TopConfig, TopPage, TrialSort,
                                      TrialsPage, job_public, trial_fields)
from autotune.service.sources import SourceError
from autotune.service.validation import check_job

router = APIRouter(prefix="/jobs", tags=["jobs"])

_NOT_FOUND = {404: {"description": "no job with this id"}}
_AUTH = {401: {"description": "no API key"}, 403: {"description": "invalid API key"}}


def _job(db: DbDep, job_id: int) -> JobRecord:
    job = db.get_job(job_id)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    return job


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobPublic,
             dependencies=[WriteAccess], responses=_AUTH)
def submit_job(body: JobCreate, manager: ManagerDep) -> JobPublic:
    """Queue a tuning job (needs an API key)."""
    return job_public(manager.submit(check_job(body)))


@router.get("", response_model=JobsPage, dependencies=[ReadAccess])
def list_jobs(db: DbDep, state: Optional[JobState] = None,
              offset: Annotated[int, Query(ge=0)] = 0,
              limit: Annotated[int, Query(ge=1, le=500)] = 50) -> JobsPage:
    """A page of jobs, newest first."""
    jobs, total = db.list_jobs(state=state, offset=offset, limit=limit)
    return JobsPage(items=[job_public(j) for j in jobs], total=total, offset=offset, limit=limit)


@router.get("/{job_id}", response_model=JobPublic, dependencies=[ReadAccess],
            responses=_NOT_FOUND)
def get_job(db: DbDep, job_id: int) -> JobPublic:
    """A job: its state, progress and best GFLOP/s so far."""
    return job_public(_job(db, job_id))


@router.post("/{job_id}/cancel", response_model=JobPublic, dependencies=[WriteAccess],
             responses={**_NOT_FOUND, **_AUTH})
def cancel_job(manager: ManagerDep, job_id: int) -> JobPublic:
    """Cancel a queued or running job; a running one stops after its current batch."""
    job = manager.cancel(job_id)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    return job_public(job)


@router.get("/{job_id}/trials", response_model=TrialsPage, dependencies=[ReadAccess],
            responses=_NOT_FOUND)
async def job_trials(db: DbDep, cache: CacheDep, job_id: int,
                     offset: Annotated[int, Query(ge=0)] = 0,
                     limit: Annotated[int, Query(ge=1, le=1000)] = 100, sort: TrialSort = "id",
                     error: Optional[ErrorKindName] = None) -> Response:
    """A page of the job's trials; sort by [-]id, [-]gflops or [-]cost; filter by error kind."""
    def page() -> bytes:
        _job(db, job_id)
        items, total = db.job_trials(job_id, offset=offset, limit=limit, sort=sort, error=error)
        return json_body({"items": [trial_fields(t) for t in items], "total": total,
                          "offset": offset, "limit": limit})

    return json_response(await cache.fetch(("trials", job_id, offset, limit, sort, error), page))


@router.get("/{job_id}/workers", response_model=JobWorkersPage, dependencies=[ReadAccess],
            responses=_NOT_FOUND)
def job_workers(db: DbDep, job_id: int) -> JobWorkersPage:
    """Who measured the job's trials: trials and failures per worker, most trials first
    ("local": records that name no worker, such as those made before workers were recorded)."""
    _job(db, job_id)
    return JobWorkersPage(items=[JobWorkerPublic(worker=worker or "local", trials=trials,
                                                 failed=failed)
                                 for worker, trials, failed in db.job_workers(job_id)])


@router.get("/{job_id}/top", response_model=TopPage, dependencies=[ReadAccess],
            responses=_NOT_FOUND)
def top_configs(db: DbDep, sources: SourcesDep, job_id: int,
                k: Annotated[int, Query(ge=1, le=20)] = 5,
                form: Literal["loop", "llvm"] = "loop") -> TopPage:
    """The k best valid configs known for the job's workload and target, with their code.

    ``loop``: the scheduled loop nest; ``llvm``: the generated source (slower, cached).
    """
    from autotune.ops import Workload
    from autotune.target import Target

    job = _job(db, job_id)
    workload, target = Workload.from_json(job.workload_key), Target(job.target_key)
    items = []
    for rank, trial in enumerate(db.top(job.workload_key, job.target_key, k), start=1):
        source, error = None, None
        try:
            source = sources.get(workload, target, trial.config, form)
        except SourceError as err:
            error = str(err)
        items.append(TopConfig(**trial_fields(trial), rank=rank, source=source,
                               source_error=error))
    return TopPage(items=items, form=form)


@router.get("/{job_id}/curves", response_model=CurvesPage, dependencies=[ReadAccess],
            responses=_NOT_FOUND)
def job_curves(db: DbDep, job_id: int, points: Annotated[int, Query(ge=2, le=2000)] = 200,
               siblings: bool = False) -> CurvesPage:
    """Best GFLOP/s against trials; with ``siblings``, also of the other jobs (other tuners,
    seeds) on the same workload and target."""
    job = _job(db, job_id)
    jobs = queries.sibling_jobs(db, job=job) if siblings else [job]
    return CurvesPage(items=[
        CurvePublic(job_id=j.id, tuner=j.tuner, state=j.state, trials=j.trials,  # type: ignore[arg-type]
                    points=queries.best_curve(db, job_id=j.id, points=points))
        for j in jobs])


@router.get("/{job_id}/events", dependencies=[ReadAccess], responses={
    **_NOT_FOUND, 200: {"content": {"text/event-stream": {}},
                        "description": "events: state, batch, end (see autotune.service.events)"}})
async def job_event_stream(db: DbDep, manager: ManagerDep, job_id: int,
                           after: Annotated[Optional[int], Query(ge=0)] = None,
                           last_event_id: Annotated[Optional[str], Header()] = None
                           ) -> StreamingResponse:
    """Server-sent events: one per measured batch, and state changes; ends with the job.

    Resume with the ``Last-Event-ID`` header (or ``?after=<id>``): only newer trials are sent.
    """
    if await to_thread.run_sync(db.get_job, job_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    start = after if after is not None else _event_id(last_event_id)
    return StreamingResponse(job_events(db, manager, job_id, start),
                             media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _event_id(header: Optional[str]) -> int:
    try:
        return max(0, int(header or 0))
    except ValueError:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                            [{"loc": ["header", "last-event-id"], "type": "int_parsing",
                              "msg": "Last-Event-ID must be an integer"}]) from None
