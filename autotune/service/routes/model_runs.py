"""Model runs (`autotune.tune_model`): `GET /model-runs`, `GET /model-runs/{id}`, and the
dashboard pages that show them. Read-only: runs are started by the library or the CLI."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Optional

from fastapi import APIRouter, HTTPException, Path, Query, status
from fastapi.responses import FileResponse, Response
from pydantic import BaseModel, Field

from autotune.db import model_runs as runs
from autotune.ops import Workload
from autotune.service.cache import cached_json
from autotune.service.deps import CacheDep, DbDep, ReadAccess
from autotune.service.routes.dashboard import STATIC_DIR
from autotune.service.schemas import JobPublic, job_public, workload_labels
from autotune.service.validation import MAX_ID, MAX_OFFSET

router = APIRouter(prefix="/model-runs", tags=["model runs"])
pages = APIRouter(include_in_schema=False)

RunId = Annotated[int, Path(ge=1, le=MAX_ID, description="model run id")]
# History points a run answers with (the newest; a point per round).
MAX_HISTORY = 5000


class ModelRunSummary(BaseModel):
    """A model run as listed."""

    id: int
    name: str
    target: str
    state: str
    budget: int = Field(description="trials for the whole model")
    trials_done: int = Field(description="trials spent (earlier records of its workloads "
                                         "included)")
    tasks: int = Field(description="distinct workloads")
    estimated_latency_s: Optional[float] = Field(
        description="sum over tasks of weight x best cost; null while a task has none")
    created_at: datetime
    updated_at: datetime
    finished_at: Optional[datetime]


class ModelRunsPage(BaseModel):
    items: list[ModelRunSummary]
    total: int
    offset: int
    limit: int


class TaskPublic(BaseModel):
    """One task of a run: its workload, weight, places in the model and tuning state."""

    index: int
    workload: dict[str, Any]
    label: str
    short_label: str = Field(default="", description="the label without parameters at their "
                                                     "defaults")
    weight: int = Field(description="times one forward pass runs it")
    nodes: list[str]
    trials: int = Field(description="records of the workload on the run's target")
    best_cost_s: Optional[float]
    share: Optional[float] = Field(description="its part of the estimated latency, 0-1")
    jobs: list[int] = Field(description="the run's jobs that tuned it, oldest first")


class HistoryPoint(BaseModel):
    elapsed_s: float
    trials_done: int
    estimated_latency_s: Optional[float]


class ModelRunDetail(ModelRunSummary):
    """A run with its tasks, what stays in torch, its latency estimate over time, and jobs."""

    error: Optional[str]
    owner: Optional[str]
    task_list: list[TaskPublic]
    unsupported: list[dict[str, str]]
    history: list[HistoryPoint]
    jobs: list[JobPublic]


def _summary(run: runs.ModelRunRecord) -> dict[str, Any]:
    return dict(id=run.id, name=run.name, target=run.target_key, state=run.state,
                budget=run.budget, trials_done=run.trials_done, tasks=len(run.tasks),
                estimated_latency_s=run.estimated_latency_s, created_at=run.created_at,
                updated_at=run.updated_at, finished_at=run.finished_at)


@router.get("", response_model=ModelRunsPage, dependencies=[ReadAccess])
async def list_model_runs(db: DbDep, cache: CacheDep,
                          offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
                          limit: Annotated[int, Query(ge=1, le=500)] = 50) -> Response:
    """A page of model runs, newest first."""
    def page() -> ModelRunsPage:
        items, total = db.list_runs(offset=offset, limit=limit)
        return ModelRunsPage(items=[ModelRunSummary(**_summary(r)) for r in items],
                             total=total, offset=offset, limit=limit)

    return await cached_json(cache, ("model-runs", offset, limit), page)


@router.get("/{run_id}", response_model=ModelRunDetail, dependencies=[ReadAccess],
            responses={404: {"description": "no model run with this id"}})
async def get_model_run(db: DbDep, cache: CacheDep, run_id: RunId) -> Response:
    """A model run: its tasks (trials, best, share of the latency), the operators left to
    torch, the estimated latency after each round, and its jobs."""
    return await cached_json(cache, ("model-run", run_id), lambda: _detail(db, run_id))


def _detail(db: DbDep, run_id: int) -> ModelRunDetail:
    run = db.get_run(run_id)
    if run is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no model run {run_id}")
    jobs = db.run_jobs(run_id)
    keys = [_key(t) for t in run.tasks]
    held = db.task_trials(keys, run.target_key)
    total = run.estimated_latency_s
    tasks = []
    for i, (task, key) in enumerate(zip(run.tasks, keys)):
        best, weight = held[key].best_cost, int(task.get("weight", 1))
        label, short = workload_labels(key)
        tasks.append(TaskPublic(
            index=i, workload=dict(task.get("workload") or {}), label=label,
            short_label=short, weight=weight,
            nodes=[str(n) for n in task.get("nodes", ())], trials=held[key].trials,
            best_cost_s=best, share=None if best is None or not total else weight * best / total,
            jobs=[j.id for j in jobs if j.workload_key == key]))
    history = [HistoryPoint(elapsed_s=t, trials_done=n, estimated_latency_s=c)
               for t, n, c in run.history[-MAX_HISTORY:]]
    return ModelRunDetail(**_summary(run), error=run.error, owner=run.owner, task_list=tasks,
                          unsupported=[dict(u) for u in run.unsupported], history=history,
                          jobs=[job_public(j) for j in jobs])


def _key(task: Any) -> str:
    return Workload.from_dict(task["workload"]).key


@pages.get("/model-runs")
def model_runs_page() -> FileResponse:
    """The model runs."""
    return FileResponse(STATIC_DIR / "model_runs.html", headers={"Cache-Control": "no-cache"})


@pages.get("/model-runs/{run_id}")
def model_run_page(run_id: int) -> FileResponse:
    """One model run (the page reads the id from its URL)."""
    return FileResponse(STATIC_DIR / "model_run.html", headers={"Cache-Control": "no-cache"})
