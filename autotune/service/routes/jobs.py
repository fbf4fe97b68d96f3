"""Job routes: submit, list, get, cancel, trials, workers, top configs, curves, events."""
from __future__ import annotations

import asyncio
from typing import Annotated, Any, AsyncIterator, Literal, Optional

from anyio import to_thread
from fastapi import APIRouter, Header, HTTPException, Query, Request, status
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from autotune.db import JobRecord
from autotune.ops import Workload
from autotune.service import queries
from autotune.service.cache import cached_json, json_body, json_response
from autotune.service.deps import (
    CacheDep,
    DbDep,
    ManagerDep,
    ReadAccess,
    SettingsDep,
    SourcesDep,
    WriteAccess,
)
from autotune.service.events import StreamLimits, StreamsFull, StreamSlot, job_events
from autotune.service.manager import QueueFull
from autotune.service.schemas import (
    BatchRankCorrelation,
    CurrentModel,
    CurvePublic,
    CurvesPage,
    ErrorKindName,
    JobCreate,
    JobPublic,
    JobsPage,
    JobState,
    JobWorkerPublic,
    JobWorkersPage,
    TopConfig,
    TopPage,
    TrialSort,
    TrialsPage,
    job_public,
    trial_fields,
)
from autotune.service.sources import SourceResult
from autotune.service.validation import MAX_ID, MAX_OFFSET, JobId, JSONBodyRoute, check_job
from autotune.target import Target

router = APIRouter(prefix="/jobs", tags=["jobs"], route_class=JSONBodyRoute)

Responses = dict[int | str, dict[str, Any]]  # OpenAPI's extra answers of a route
_NOT_FOUND: Responses = {404: {"description": "no job with this id"}}
_AUTH: Responses = {401: {"description": "no API key"}, 403: {"description": "invalid API key"}}
_BUSY: Responses = {429: {"description": "a limit is reached (the reason is in `detail`); "
                                         "retry later"}}
_RETRY_AFTER_S = "5"


def _job(db: DbDep, job_id: int) -> JobRecord:
    # Ids beyond the database's 64-bit range cannot exist (and would overflow its driver).
    job = db.get_job(job_id) if 0 < job_id <= MAX_ID else None
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    return job


# What a client can do next with a job it created (OpenAPI links: generated clients and the
# stateful fuzz test follow them).
_NEXT = {name: {"operationId": name, "parameters": {"job_id": "$response.body#/id"}}
         for name in ("get_job", "cancel_job", "job_trials", "job_workers")}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobPublic,
             dependencies=[WriteAccess], operation_id="submit_job",
             responses={201: {"description": "the job, queued", "links": _NEXT},
                        **_AUTH, **_BUSY})
def submit_job(body: JobCreate, manager: ManagerDep, settings: SettingsDep) -> JobPublic:
    """Queue a tuning job (needs an API key); 429 while the queue is full."""
    # On a Ray cluster the job waits for a worker of its target; here this host must run it.
    spec = check_job(body, measured_here=not settings.ray_address)
    try:
        return job_public(manager.submit(spec, max_queued=settings.max_queued_jobs))
    except QueueFull as err:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(err),
                            headers={"Retry-After": _RETRY_AFTER_S}) from None


@router.get("", response_model=JobsPage, dependencies=[ReadAccess])
async def list_jobs(db: DbDep, cache: CacheDep, state: Optional[JobState] = None,
                    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
                    limit: Annotated[int, Query(ge=1, le=500)] = 50) -> Response:
    """A page of jobs, newest first."""
    def page() -> JobsPage:
        jobs, total = db.list_jobs(state=state, offset=offset, limit=limit)
        return JobsPage(items=[job_public(j) for j in jobs], total=total, offset=offset,
                        limit=limit)

    return await cached_json(cache, ("jobs", state, offset, limit), page)


@router.get("/{job_id}", response_model=JobPublic, dependencies=[ReadAccess],
            responses=_NOT_FOUND, operation_id="get_job")
async def get_job(db: DbDep, cache: CacheDep, job_id: JobId) -> Response:
    """A job: its state, progress and best GFLOP/s so far."""
    return await cached_json(cache, ("job", job_id), lambda: job_public(_job(db, job_id)))


@router.post("/{job_id}/cancel", response_model=JobPublic, dependencies=[WriteAccess],
             responses={**_NOT_FOUND, **_AUTH}, operation_id="cancel_job")
def cancel_job(manager: ManagerDep, job_id: JobId) -> JobPublic:
    """Cancel a queued or running job; a running one stops within seconds, its batch in
    flight given up, and nothing more is recorded for it once this returns."""
    job = manager.cancel(job_id)
    if job is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    return job_public(job)


@router.get("/{job_id}/trials", response_model=TrialsPage, dependencies=[ReadAccess],
            responses=_NOT_FOUND, operation_id="job_trials")
async def job_trials(db: DbDep, cache: CacheDep, job_id: JobId,
                     offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
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
            responses=_NOT_FOUND, operation_id="job_workers")
async def job_workers(db: DbDep, cache: CacheDep, job_id: JobId) -> Response:
    """Who measured the job's trials: trials and failures per worker, most trials first
    ("local": records that name no worker, such as those made before workers were recorded)."""
    def page() -> JobWorkersPage:
        _job(db, job_id)
        return JobWorkersPage(items=[JobWorkerPublic(worker=worker or "local", trials=trials,
                                                     failed=failed)
                                     for worker, trials, failed in db.job_workers(job_id)])

    return await cached_json(cache, ("workers", job_id), page)


@router.get("/{job_id}/top", response_model=TopPage, dependencies=[ReadAccess],
            responses=_NOT_FOUND)
async def top_configs(db: DbDep, sources: SourcesDep, cache: CacheDep, job_id: JobId,
                      k: Annotated[int, Query(ge=1, le=20)] = 5,
                      form: Literal["loop", "source"] = "loop") -> Response:
    """The k best valid configs known for the job's workload and target (the ranking of
    `/best`), with their code.

    ``loop``: the scheduled loop nest; ``source``: the generated source (LLVM IR, or CUDA C
    on GPU targets). Each is made once, off the request threads, and cached; ``source_error``
    says why a config has none (e.g. not ready within the service's source timeout).
    """
    def load() -> tuple[list, Optional[Workload], Optional[Target], Optional[str]]:
        job = _job(db, job_id)
        trials = db.top(job.workload_key, job.target_key, k)
        try:
            return trials, Workload.from_json(job.workload_key), Target(job.target_key), None
        except ValueError as err:  # a record this version cannot read back
            return trials, None, None, f"{type(err).__name__}: {err}"

    async def page() -> bytes:
        trials, workload, target, error = await to_thread.run_sync(load)
        if workload is None or target is None:
            results = [SourceResult(error=error)] * len(trials)
        else:
            results = await asyncio.gather(*(sources.get(workload, target, trial.config, form)
                                             for trial in trials))
        return json_body(TopPage(items=[
            TopConfig(**trial_fields(trial), rank=rank, source=result.text,
                      source_error=result.error)
            for rank, (trial, result) in enumerate(zip(trials, results), start=1)], form=form))

    # Cached like the other hot reads: a page of generated code is large, and building it
    # for every client of a busy job would hold the interpreter from every other request.
    return json_response(await cache.fetch(("top", job_id, k, form), page))


@router.get("/{job_id}/curves", response_model=CurvesPage, dependencies=[ReadAccess],
            responses=_NOT_FOUND)
async def job_curves(db: DbDep, cache: CacheDep, job_id: JobId,
                     points: Annotated[int, Query(ge=2, le=2000)] = 200,
                     siblings: bool = False) -> Response:
    """Fastest first measurement against trials, the job's best and its default config's
    standing (``default``); with ``siblings``,
    also of the other jobs (other tuners, seeds) on the same workload and target.
    ``rank_correlation``: how well the job's cost model ranked each batch it scored;
    ``current_model``: its latest model's score of each of the job's valid trials against
    the measured GFLOP/s."""
    return await cached_json(cache, ("curves", job_id, points, siblings),
                             lambda: _curves(db, job_id, points, siblings))


def _curves(db: DbDep, job_id: int, points: int, siblings: bool) -> CurvesPage:
    job = _job(db, job_id)
    jobs = queries.sibling_jobs(db, job=job) if siblings else [job]
    scatter = queries.model_scatter(db, job_id=job_id)
    return CurvesPage(default=queries.default_standing(db, job=job), items=[
        CurvePublic(job_id=j.id, tuner=j.tuner, state=j.state, trials=j.trials,  # type: ignore[arg-type]
                    points=queries.best_curve(db, job_id=j.id, points=points),
                    best_gflops=j.best_gflops)
        for j in jobs], rank_correlation=[
        BatchRankCorrelation(batch=batch, pairs=pairs, rho=rho)
        for batch, pairs, rho in queries.rank_correlation(db, job_id=job_id)],
        current_model=None if scatter is None else CurrentModel(
            batch=scatter.batch, trials=scatter.trials, points=scatter.points, rho=scatter.rho))


@router.get("/{job_id}/events", dependencies=[ReadAccess], responses={
    **_NOT_FOUND, **_BUSY,
    200: {"content": {"text/event-stream": {}},
          "description": "events: state, batch, end (see autotune.service.events)"}})
async def job_event_stream(request: Request, db: DbDep, manager: ManagerDep,
                           settings: SettingsDep, cache: CacheDep, job_id: JobId,
                           after: Annotated[Optional[int], Query(ge=0, le=MAX_ID)] = None,
                           last_event_id: Annotated[int, Header(
                               ge=0, le=MAX_ID, description="resume after this event id "
                               "(what the browser sends on reconnecting)")] = 0
                           ) -> StreamingResponse:
    """Server-sent events: one per measured batch, and state changes; ends with the job.

    Resume with the ``Last-Event-ID`` header (or ``?after=<id>``): only newer trials are sent.
    A stream lasts at most ``AUTOTUNE_EVENT_STREAM_LIFETIME_S``, then closes (reconnect); 429
    while too many streams are open.
    """
    start = after if after is not None else last_event_id
    if await to_thread.run_sync(db.get_job, job_id) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job {job_id}")
    streams: StreamLimits = request.app.state.streams
    try:
        slot = streams.open(request.client.host if request.client else "")
    except StreamsFull as err:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(err),
                            headers={"Retry-After": _RETRY_AFTER_S}) from None
    stream = job_events(db, manager, cache, job_id, start,
                        lifetime_s=settings.event_stream_lifetime_s)
    # Released when the stream ends or the client goes, and (background) if it never started.
    return StreamingResponse(_holding(slot, stream), media_type="text/event-stream",
                             background=BackgroundTask(slot.release),
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _holding(slot: StreamSlot, stream: AsyncIterator[str]) -> AsyncIterator[str]:
    try:
        async for chunk in stream:
            yield chunk
    finally:
        slot.release()
