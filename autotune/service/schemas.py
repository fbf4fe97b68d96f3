"""Wire schemas of the REST API: what clients send (create) and what they get back (public).

Kept apart from the database records; the ``*_public`` helpers convert records to schemas.
"""
from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from itertools import combinations
from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from autotune.db import JobRecord, TrialRecord
from autotune.job_options import MAX_SEED, MAX_TRIALS, MEASURE_BOUNDS
from autotune.ops import DTYPES, EPILOGUE_STAGES, OPS, PREPACKABLE_OPS, Workload, op_dtypes
from autotune.ops.epilogue import ACTIVATIONS
from autotune.ops.layout import LAYOUT_OPS, MIXED_OPS, NCHW, NHWC_OPS
from autotune.ops.spec import OpSpec, ParamSpec
from autotune.ops.workload import BLOCKED_PREPACKABLE_OPS
from autotune.search.registry import TUNERS
from autotune.target import MAX_SPEC_CHARS

JobState = Literal["queued", "running", "done", "failed", "cancelled"]
TrialSort = Literal["id", "-id", "gflops", "-gflops", "cost", "-cost"]
ErrorKindName = Literal["none", "instantiation", "compile", "runtime", "wrong_answer",
                        "build_timeout", "run_timeout", "transient"]
# Enums of what the op table accepts, so that the schema lists them (pydantic checks them
# against the same tables); to mypy, strings.
if TYPE_CHECKING:
    OpName = str
    StageName = str
    DtypeName = str
    TunerName = str
else:
    OpName = Literal[tuple(OPS)]
    StageName = Literal[EPILOGUE_STAGES]
    DtypeName = Literal[DTYPES]
    TunerName = Literal[tuple(TUNERS)]
# A chain holds each stage once, and at most one of bias/scale_shift and one activation
# (so at most three: affine, residual, activation).
_EPILOGUE_RULES: dict[str, Any] = {"uniqueItems": True, "maxItems": 3, "not": {"anyOf": [
    {"allOf": [{"contains": {"const": a}}, {"contains": {"const": b}}]}
    for a, b in (("bias", "scale_shift"), *combinations(ACTIVATIONS, 2))]}}
# A target spec or key as `autotune.target.Target` parses it: a kind, then -name=value
# options of that kind, separated by spaces or tabs (validation holds specs to this too).
TARGET_PATTERN = (r"^[ \t]*(llvm([ \t]+-+(mcpu|cores|vector-bits)=[A-Za-z0-9_.-]+"
                  r"|[ \t]+-+mattr=[+-][A-Za-z0-9_.-]+(,[+-][A-Za-z0-9_.-]+)*)*"
                  r"|cuda([ \t]+-+arch=[A-Za-z0-9_.-]+)*)[ \t]*$")
# NHWC, or NCHW<x>c with 2 <= x <= MAX_BLOCK (64), or two of those as IN>OUT, as
# `autotune.ops.layout.layout_blocks` takes them (a test holds the two together).
_BLOCKED_PATTERN = r"NCHW([2-9]c|[1-5][0-9]c|6[0-4]c)?"
_LAYOUT_PATTERN = rf"^(NHWC|{_BLOCKED_PATTERN}(>{_BLOCKED_PATTERN})?)$"


def _layout_schema(op: str) -> dict[str, Any]:
    """The layouts ``op`` takes (`autotune.ops.layout`): NCHW alone for an op without
    blocked ones; NCHW<x>c for those in LAYOUT_OPS, NHWC only for conv2d, IN>OUT for
    the convs (MIXED_OPS).
    Which target runs which the job's check says (a 422 at the layout)."""
    if op not in LAYOUT_OPS:
        return {"const": NCHW}
    if op in NHWC_OPS and op in MIXED_OPS:
        return {}
    nhwc = "NHWC|" if op in NHWC_OPS else ""
    two = f"(>{_BLOCKED_PATTERN})?" if op in MIXED_OPS else ""
    return {"pattern": f"^({nhwc}{_BLOCKED_PATTERN}{two})$"}


def _blocked_prepacked() -> dict[str, Any]:
    """A depthwise conv's prepacked form is blocked (`BLOCKED_PREPACKABLE_OPS`): unpacked,
    or in a layout other than NCHW."""
    return {"anyOf": [{"properties": {"prepacked": {"const": False}}},
                      {"properties": {"layout": {"not": {"const": NCHW}}},
                       "required": ["layout"]}]}


def _param_schema(param: ParamSpec) -> dict[str, Any]:
    """An op parameter: an extent from its minimum to 2**20 (`validation.MAX_EXTENT`), or
    for a pair parameter also an [h, w] array of them."""
    extent = {"type": "integer", "minimum": param.minimum, "maximum": 2**20}
    if not param.pair:
        return extent
    return {"anyOf": [extent, {"type": "array", "items": extent, "minItems": 2,
                               "maxItems": 2}]}


def _op_schema(op: str, spec: OpSpec) -> dict[str, Any]:
    """What a workload of ``op`` takes (one branch of WorkloadIn's ``oneOf`` on ``op``):
    its parameters by name, the required ones required, no others; its dtypes
    (`autotune.ops.dtypes.op_dtypes`); no epilogue for an op without one (max_pool2d); its
    layouts (`_layout_schema`); the prepacked form only for conv2d and matmul, and for a
    blocked depthwise conv (`_blocked_prepacked`)."""
    params = {"type": "object", "properties": {p.name: _param_schema(p) for p in spec.params},
              "required": [p.name for p in spec.params if p.required],
              "additionalProperties": False}
    properties: dict[str, Any] = {"op": {"const": op}, "params": params,
                                  "dtype": {"enum": list(op_dtypes(op))}}
    if not spec.epilogue:
        properties["epilogue"] = {"maxItems": 0}
    layout = _layout_schema(op)
    if layout:
        properties["layout"] = layout
    if op not in PREPACKABLE_OPS | BLOCKED_PREPACKABLE_OPS:
        properties["prepacked"] = {"const": False}
    branch = {"properties": properties, "required": ["op", "params"]}
    return {**branch, **_blocked_prepacked()} if op in BLOCKED_PREPACKABLE_OPS else branch


_OP_SCHEMAS: Any = {"oneOf": [_op_schema(op, spec) for op, spec in OPS.items()]}


class WorkloadIn(BaseModel):
    """An operator instance as sent by a client; checked against the op table on submit."""

    # strict: a JSON false is not a 0, nor "64" a 64 (what the schema promises is what counts)
    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={
        "examples": [{"op": "matmul", "params": {"M": 512, "N": 512, "K": 512}}],
        **_OP_SCHEMAS})

    op: OpName = Field(description="operator name (see GET /api/v1/ops)")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="the op's integer sizes by name (its own set: see GET /api/v1/ops); "
                    "pair params take an int or [h, w]")
    dtype: DtypeName = Field(
        default="float32", description="element type of every argument; float16 and bfloat16 "
        "(matmul, batch_matmul, conv2d) accumulate in float32 and run on cuda targets only, "
        "bfloat16 from sm_80 (see GET /api/v1/ops)")
    prepacked: bool = Field(
        default=False,
        description="tune the form whose constant operand (a conv's weight, matmul's B) is "
                    "packed once beforehand, as a compiled model runs it, instead of inside "
                    "every call: its own records; conv2d, group_conv2d, matmul and "
                    "blocked depthwise_conv2d on llvm targets only")
    layout: str = Field(
        default=NCHW, pattern=_LAYOUT_PATTERN, max_length=15,
        description="the data and output layout of conv2d, group_conv2d, depthwise_conv2d "
                    "(multiplier 1), max_pool2d, avg_pool2d, global_avg_pool2d, "
                    "channel_mul, channel_affine and channel_shuffle: NCHW, "
                    "NCHW<x>c with channels blocked by x (2 to 64; C and K multiples of x, "
                    "C/groups and K/groups too): data [N, C/x, H, W, x], output and residual "
                    "[N, K/x, OH, OW, x] (llvm targets); a conv's data and output in two "
                    "of those as IN>OUT (NCHW>NCHW16c: NCHW data, blocked output); "
                    "or conv2d's NHWC: data [N, H, W, C], weight [K, R, S, C], output and "
                    "residual [N, OH, OW, K] (cuda -arch=sm_90a, half dtypes); its own "
                    "records")
    epilogue: list[StageName] = Field(
        default_factory=list, json_schema_extra=_EPILOGUE_RULES,
        description="fused stages, e.g. ['bias', 'relu'] or ['bias', 'residual', 'relu']: "
                    "each at most once, and at most one of bias and scale_shift and one "
                    "activation; none for max_pool2d, avg_pool2d, global_avg_pool2d, "
                    "channel_mul and channel_shuffle")


def _measure_option(name: str) -> Any:
    bound = MEASURE_BOUNDS[name]
    return Field(default=None, ge=bound.minimum, le=bound.maximum,
                 description=f"{bound.description} (AUTOTUNE_{name.upper()} when left out)")


class MeasureOptionsIn(BaseModel):
    """A job's measurement options over the service's settings of the same names, each
    bounded as `autotune.job_options.MEASURE_BOUNDS` says."""

    model_config = ConfigDict(extra="forbid", strict=True)

    repeat: Optional[int] = _measure_option("repeat")
    number: Optional[int] = _measure_option("number")
    min_repeat_ms: Optional[float] = _measure_option("min_repeat_ms")
    build_timeout: Optional[float] = _measure_option("build_timeout")
    run_timeout: Optional[float] = _measure_option("run_timeout")

    def given(self) -> dict[str, Any]:
        """The options the client set."""
        return self.model_dump(exclude_none=True)


class JobSettings(BaseModel):
    """How a job tunes: what POST /jobs accepts and GET /jobs/{id} returns, by the same names."""

    model_config = ConfigDict(extra="forbid", strict=True)

    tuner: Optional[TunerName] = Field(
        default=None,
        description="tuner name (see GET /api/v1/tuners); default: the model-guided one")
    trials: int = Field(default=64, ge=1, le=MAX_TRIALS, description="trial budget")
    transfer: bool = Field(default=True, description="learn from other workloads' records (xgb)")
    early_stopping: Optional[int] = Field(
        default=None, ge=1, le=MAX_TRIALS,
        description="stop after this many trials without a new best")
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    tuner_options: dict[str, Any] = Field(
        default_factory=dict, description="options of the tuner (see GET /api/v1/tuners)")
    measure_options: MeasureOptionsIn = Field(
        default_factory=MeasureOptionsIn,
        description="measurement options over the service's AUTOTUNE_* settings of the same "
                    "names; none on a Ray cluster (workers time with theirs)")


# The fields of JobSettings a job row keeps in its options column (tuner, trials: columns).
_STORED = ("transfer", "early_stopping", "seed", "tuner_options", "measure_options")


def job_settings(job: JobRecord) -> dict[str, Any]:
    """A job row's settings as `JobSettings` fields; rows from before a field existed read
    with its default, and keys no longer shown (``batch_size``) are left out."""
    return {"tuner": job.tuner, "trials": job.trials,
            **{name: job.options[name] for name in _STORED if name in job.options}}


class JobCreate(JobSettings):
    """A tuning job to submit."""

    model_config = ConfigDict(json_schema_extra={"examples": [
        {"workload": {"op": "matmul", "params": {"M": 64, "N": 64, "K": 64}}, "trials": 8,
         "tuner": "random"}]})

    workload: WorkloadIn
    target: str = Field(default="llvm", pattern=TARGET_PATTERN, max_length=MAX_SPEC_CHARS,
                        description="target spec, e.g. 'llvm' or 'cuda -arch=sm_90' (see "
                                    "GET /api/v1/ops for the kinds an op runs on)")


class ConfigPublic(BaseModel):
    index: int
    knobs: dict[str, Any]


class JobPublic(JobSettings):
    """A job as the API shows it: its `JobSettings` as submitted (``tuner`` resolved), then
    where it stands."""

    # Built from stored rows, not client input: no strictness to enforce.
    model_config = ConfigDict(extra="ignore", strict=False)

    measure_options: dict[str, Any] = Field(  # type: ignore[assignment]
        default_factory=dict, description="the measurement options the job was given (the "
                                          "service's settings measure the others)")
    tuner: str = Field(  # a row may name a tuner of another version
        description="tuner name (see GET /api/v1/tuners)")

    id: int
    state: JobState
    workload: dict[str, Any]
    label: str = Field(description="human-readable workload name, every parameter")
    short_label: str = Field(default="", description="the label without parameters at "
                                                     "their defaults (the dashboard's)")
    target: str
    trials_done: int
    best_gflops: Optional[float]
    error: Optional[str]
    created_at: datetime
    started_at: Optional[datetime]
    finished_at: Optional[datetime]
    waiting: Optional[str] = Field(
        default=None,
        description="why the job is queued although claimed (e.g. no live worker for "
                    "its target); null otherwise")
    owner: Optional[str] = Field(
        default=None, description="which process runs it (host:pid:token); null when none does")
    model_run: Optional[int] = Field(
        default=None, description="the model run whose task it tunes (its trials come from "
                                  "the run's budget: `trials` is what was left of it)")


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
    predicted: Optional[float] = Field(
        default=None, description="the cost model's score, when it had one")
    retimed_cost: Optional[float] = Field(
        default=None, description="median seconds per call in the latest accepted re-timing "
                                  "window of its workload and target, when it was one of its "
                                  "members: then it ranks by this, not by cost (the first "
                                  "measurement's)")
    retimed_gflops: Optional[float] = Field(
        default=None, description="GFLOP/s at retimed_cost")


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
    form: Literal["loop", "source"]


class CurvePublic(BaseModel):
    """Fastest first measurement so far against trials for one job (downsampled), and the
    job's best."""

    job_id: int
    tuner: str
    state: JobState
    trials: int
    points: list[tuple[int, float]] = Field(
        description="(trials, fastest first measurement of the job's trials so far in GFLOP/s)")
    best_gflops: Optional[float] = Field(
        default=None, description="the job's best (as in the job): the re-timed figure of its "
                                  "final re-timing window's winner once it has one")


class BatchRankCorrelation(BaseModel):
    """How well one batch's cost-model scores ordered its measurements."""

    batch: int = Field(description="the job's trials measured before this batch")
    pairs: int = Field(description="valid trials of the batch that have a score")
    rho: float = Field(description="Spearman rank correlation of scores and GFLOP/s, -1..1")


class CurrentModel(BaseModel):
    """The job's cost model as it stands (its last refit) scoring the job's valid trials:
    one model version, so the scores share one scale, unlike the trials' ``predicted``."""

    batch: int = Field(description="the batch the model was last fit after, named like "
                                   "rank_correlation's: the job's trials before it")
    trials: int = Field(description="the job's trials measured when the model was fit")
    points: list[tuple[float, float]] = Field(
        description="(model score, measured GFLOP/s) per valid trial, in measurement order; "
                    "at most 2000 trials are scored (the fastest half, then the most recent)")
    rho: Optional[float] = Field(description="Spearman rank correlation of the points, -1..1 "
                                             "(null below 3 points or when one side is flat)")


class DefaultStanding(BaseModel):
    """The template's default config of a job's workload on its target, and where it
    stands: what tuning is measured against (a tuned kernel never runs slower)."""

    config_index: str = Field(description="its index in the space (decimal)")
    gflops: Optional[float] = Field(
        default=None, description="its figure by the ranking of /best (re-timed when the "
                                  "latest window holds it); null when it has no valid record")
    retimed: bool = Field(default=False, description="whether gflops is a re-timed figure")
    is_best: bool = Field(default=False, description="nothing beat it: it is the best record")


class CurvesPage(BaseModel):
    items: list[CurvePublic]
    default: Optional[DefaultStanding] = Field(
        default=None, description="of the requested job: its workload's default config "
                                  "(null when this version has no space for the workload)")
    rank_correlation: list[BatchRankCorrelation] = Field(
        default_factory=list, description="of the requested job, per batch its cost model "
        "scored (empty for tuners without a model)")
    current_model: Optional[CurrentModel] = Field(
        default=None, description="of the requested job: its current cost model's scores of "
        "its trials against their GFLOP/s (null for tuners without a model, or before the "
        "first fit)")


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
def _workload_view(key: str) -> tuple[str, str, str]:
    """(wire JSON in the op table's order, label, short label) of a workload key; keys never
    change."""
    try:
        wl = Workload.from_json(key)
    except ValueError:  # a record of an op this version no longer knows
        op = json.loads(key).get("op", "?")
        return key, op, op
    return json.dumps(wl.to_dict()), str(wl), wl.brief()


def workload_labels(key: str) -> tuple[str, str]:
    """(label, short label) of a workload key."""
    return _workload_view(key)[1:]


def job_public(job: JobRecord) -> JobPublic:
    """The API form of a job record."""
    wire, label, short = _workload_view(job.workload_key)
    return JobPublic(id=job.id, state=job.state, workload=json.loads(wire),  # type: ignore[arg-type]
                     label=label, short_label=short, target=job.target_key, **job_settings(job),
                     trials_done=job.trials_done, best_gflops=job.best_gflops, error=job.error,
                     created_at=job.created_at, started_at=job.started_at,
                     finished_at=job.finished_at, waiting=job.waiting, owner=job.owner,
                     model_run=job.model_run_id)


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
            "run_s": trial.run_s, "timestamp": trial.timestamp, "predicted": _predicted(trial),
            "retimed_cost": trial.retimed_cost,
            "retimed_gflops": trial.ranked_gflops if trial.retimed_cost is not None else None}


def best_public(trial: TrialRecord) -> BestPublic:
    wire = _workload_view(trial.workload_key)[0]
    return BestPublic(**trial_fields(trial), workload=json.loads(wire),
                      target=trial.target_key)
