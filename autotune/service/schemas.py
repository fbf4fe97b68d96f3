"""Wire schemas of the REST API: what clients send (create) and what they get back (public).

Kept apart from the database records; the ``*_public`` helpers convert records to schemas.
"""
from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from autotune.db import JobRecord, TrialRecord

MAX_TRIALS = 100_000
JobState = Literal["queued", "running", "done", "failed", "cancelled"]
TrialSort = Literal["id", "-id", "gflops", "-gflops", "cost", "-cost"]
ErrorKindName = Literal["none", "instantiation", "compile", "runtime", "wrong_answer",
                        "build_timeout", "run_timeout", "transient"]


class WorkloadIn(BaseModel):
    """An operator instance as sent by a client; checked against the op table on submit."""

    # strict: a JSON false is not a 0, nor "64" a 64 (what the schema promises is what counts)
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "examples": [{"op": "matmul", "params": {"M": 512, "N": 512, "K": 512}}]})

    op: str = Field(description="operator name (see GET /api/v1/ops)")
    params: dict[str, Any] = Field(
        default_factory=dict, description="integer sizes; pair params take an int or [h, w]")
    dtype: str = "float32"
    epilogue: list[str] = Field(default_factory=list, description="e.g. ['bias', 'relu']")


class JobCreate(BaseModel):
    """A tuning job to submit."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [
        {"workload": {"op": "matmul", "params": {"M": 64, "N": 64, "K": 64}}, "trials": 8,
         "tuner": "random"}]})

    workload: WorkloadIn
    target: str = Field("llvm", description="target spec, e.g. 'llvm' or 'cuda -arch=sm_90'")
    trials: int = Field(64, ge=1, le=MAX_TRIALS, description="trial budget")
    tuner: Optional[str] = Field(
        None, description="tuner name (see GET /api/v1/tuners); default: the model-guided one")
    transfer: bool = Field(True, description="learn from other workloads' records (xgb)")
    early_stopping: Optional[int] = Field(
        None, ge=1, le=MAX_TRIALS, description="stop after this many trials without a new best")
    seed: int = Field(0, ge=0, le=2**32 - 1)
    options: dict[str, Any] = Field(default_factory=dict, description="tuner options")


class ConfigPublic(BaseModel):
    index: int
    knobs: dict[str, Any]


class JobPublic(BaseModel):
    """A job as the API shows it."""

    id: int
    state: JobState
    workload: dict[str, Any]
    label: str = Field(description="short human-readable workload name")
    target: str
    tuner: str
    trials: int = Field(description="trial budget")
    trials_done: int
    best_gflops: Optional[float]
    error: Optional[str]
    options: dict[str, Any]
    created_at: datetime
    started_at: Optional[datetime]
    finished_at: Optional[datetime]
    waiting: Optional[str] = Field(
        None, description="why the job is queued although claimed (e.g. no live worker for "
                          "its target); null otherwise")
    owner: Optional[str] = Field(
        None, description="which process runs it (host:pid:token); null when none does")


class JobsPage(BaseModel):
    items: list[JobPublic]
    total: int
    offset: int
    limit: int


class JobWorkerPublic(BaseModel):
    """How many of a job's trials one worker measured."""

    worker: str = Field(description="worker id; 'local' for records that name none")
    trials: int
    failed: int = Field(description="trials that failed (any error kind)")


class JobWorkersPage(BaseModel):
    items: list[JobWorkerPublic]


class TrialPublic(BaseModel):
    """One measured config (cost and gflops are null when it failed)."""

    id: int
    job_id: Optional[int]
    config: ConfigPublic
    cost: Optional[float] = Field(description="median seconds per call")
    costs: list[float]
    gflops: Optional[float]
    error: str
    error_msg: str
    build_s: float
    run_s: float
    timestamp: float
    predicted: Optional[float] = Field(None, description="the cost model's score, when it had one")


class TrialsPage(BaseModel):
    items: list[TrialPublic]
    total: int
    offset: int
    limit: int


class BestPublic(TrialPublic):
    """The best valid record for a workload on a target."""

    workload: dict[str, Any]
    target: str


class TopConfig(TrialPublic):
    """A top config with the code it generates."""

    rank: int
    source: Optional[str]
    source_error: Optional[str] = None


class TopPage(BaseModel):
    items: list[TopConfig]
    form: Literal["loop", "llvm"]


class CurvePublic(BaseModel):
    """Best GFLOP/s so far against trials for one job (downsampled)."""

    job_id: int
    tuner: str
    state: JobState
    trials: int
    points: list[tuple[int, float]]


class CurvesPage(BaseModel):
    items: list[CurvePublic]


class SourceStats(BaseModel):
    """Generated code for /jobs/{id}/top (see `autotune.service.sources`)."""

    cached: int = Field(description="sources in the cache")
    pending: int = Field(description="sources being generated now")
    made: int = Field(description="sources generated since the service started")
    timeouts: int = Field(description="configs answered with a timeout as source_error")


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    db: str
    workers: int = Field(description="job worker threads configured (max_concurrent_jobs)")
    job_threads: int = Field(description="job worker threads alive (dead ones are started "
                                         "again when health is asked, and every few seconds)")
    job_threads_restarted: int = Field(description="job worker threads found dead and "
                                                   "started again since the service started")
    lease_keeper: bool = Field(description="whether the thread renewing job leases is alive")
    executors: list[str] = Field(description="target keys of the open executors (closed "
                                             "after executor_idle_s unused)")
    sources: SourceStats
    auth: Literal["on", "off"]
    owner: str = Field(description="the owner id this service runs jobs under")


@lru_cache(maxsize=4096)
def _workload_view(key: str) -> tuple[str, str]:
    """(wire JSON in the op table's order, short label) of a workload key; keys never change."""
    from autotune.ops import Workload

    try:
        wl = Workload.from_json(key)
    except ValueError:  # a record of an op this version no longer knows
        return key, json.loads(key).get("op", "?")
    return json.dumps(wl.to_dict()), str(wl)


def job_public(job: JobRecord) -> JobPublic:
    """The API form of a job record."""
    wire, label = _workload_view(job.workload_key)
    return JobPublic(id=job.id, state=job.state, workload=json.loads(wire),  # type: ignore[arg-type]
                     label=label, target=job.target_key, tuner=job.tuner,
                     trials=job.trials, trials_done=job.trials_done,
                     best_gflops=job.best_gflops, error=job.error, options=job.options,
                     created_at=job.created_at, started_at=job.started_at,
                     finished_at=job.finished_at, waiting=job.waiting, owner=job.owner)


def _predicted(trial: TrialRecord) -> Optional[float]:
    value = trial.extra.get("predicted")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def trial_fields(trial: TrialRecord) -> dict[str, Any]:
    """The fields every trial schema shares, from a record."""
    config = trial.config if "knobs" in trial.config else {"index": trial.config_index,
                                                           "knobs": trial.config}
    return {"id": trial.id, "job_id": trial.job_id,
            "config": {"index": trial.config_index, "knobs": config.get("knobs", {})},
            "cost": trial.cost, "costs": list(trial.costs), "gflops": trial.gflops,
            "error": trial.error, "error_msg": trial.error_msg, "build_s": trial.build_s,
            "run_s": trial.run_s, "timestamp": trial.timestamp, "predicted": _predicted(trial)}


def trial_public(trial: TrialRecord) -> TrialPublic:
    return TrialPublic(**trial_fields(trial))


def best_public(trial: TrialRecord) -> BestPublic:
    wire = _workload_view(trial.workload_key)[0]
    return BestPublic(**trial_fields(trial), workload=json.loads(wire),
                      target=trial.target_key)
