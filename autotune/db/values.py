"""Records that leave the database layer, and the duck types it accepts from callers
(`TrialRecord` is defined below the database, in `autotune.records`)."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping, Optional, Protocol, Union

from autotune.db.schema import ApiKeyRow, JobRow, TrialRow
from autotune.records import TrialRecord
from autotune.records.codec import HasKey


class WorkloadLike(Protocol):
    """What the database needs of a workload: its canonical JSON key and op name."""

    @property
    def key(self) -> str: ...
    @property
    def op(self) -> str: ...


class TargetLike(Protocol):
    """What the database needs of a target: its stable key and kind ("llvm", "cuda")."""

    @property
    def key(self) -> str: ...
    @property
    def kind(self) -> str: ...


class ConfigLike(Protocol):
    """What the database needs of a config: its space index and dict form."""

    @property
    def index(self) -> int: ...
    def to_dict(self) -> Mapping[str, Any]: ...


KeyOrObject = Union[str, HasKey]


def key_of(obj: KeyOrObject) -> str:
    """The database key of a workload/target object, or the string itself."""
    return obj if isinstance(obj, str) else obj.key


class RetimedLike(Protocol):
    """One member of a re-timing window, as the database records it
    (`autotune.search.result.Retimed`)."""

    @property
    def config_index(self) -> int: ...
    @property
    def retimed_cost(self) -> Optional[float]: ...
    @property
    def disqualified(self) -> bool: ...
    @property
    def error(self) -> str: ...
    @property
    def error_msg(self) -> str: ...
    def record(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class JobRecord:
    """A tuning job: what to tune, its budget and options, and where it stands."""

    id: int
    workload_key: str
    target_key: str
    tuner: str
    trials: int
    state: str
    options: dict[str, Any]
    error: Optional[str]
    best_gflops: Optional[float]
    trials_done: int
    created_at: datetime
    started_at: Optional[datetime]
    finished_at: Optional[datetime]
    updated_at: Optional[datetime] = None
    owner: Optional[str] = None  # the process running it ("host:pid:token"), None when none
    lease_expires_at: Optional[datetime] = None
    waiting: Optional[str] = None  # why a claimed job waits (state 'queued')
    model_run_id: Optional[int] = None  # the model run whose task it tunes, if any


@dataclass(frozen=True)
class ApiKeyRecord:
    """An API key as listed: never the key itself, only its display prefix."""

    id: int
    name: str
    prefix: str
    created_at: datetime
    revoked: bool


def utc(value: Optional[datetime]) -> Optional[datetime]:
    # SQLite returns naive datetimes, PostgreSQL the session's zone; every stored time is UTC.
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def trial_record(row: TrialRow, workload_key: str, target_key: str) -> TrialRecord:
    return TrialRecord(
        workload_key=workload_key,
        target_key=target_key,
        config=dict(row.config),
        config_index=int(row.config_key),
        costs=tuple(float(c) for c in row.costs),
        cost=row.cost,
        gflops=row.gflops,
        error=row.error,
        error_msg=row.error_msg,
        build_s=row.build_s,
        run_s=row.run_s,
        timestamp=row.timestamp,
        job_id=row.job_id,
        extra=dict(row.extra or {}),
        id=row.id,
        worker=row.worker,
        retimed_cost=row.retimed_cost,
    )


def job_record(row: JobRow, workload_key: str, target_key: str) -> JobRecord:
    return JobRecord(
        id=row.id,
        workload_key=workload_key,
        target_key=target_key,
        tuner=row.tuner,
        trials=row.trials,
        state=row.state,
        options=dict(row.options or {}),
        error=row.error,
        best_gflops=row.best_gflops,
        trials_done=row.trials_done,
        created_at=utc(row.created_at),  # type: ignore[arg-type]
        started_at=utc(row.started_at),
        finished_at=utc(row.finished_at),
        updated_at=utc(row.updated_at),
        owner=row.owner,
        lease_expires_at=utc(row.lease_expires_at),
        waiting=row.waiting,
        model_run_id=row.model_run_id,
    )


def api_key_record(row: ApiKeyRow) -> ApiKeyRecord:
    created = utc(row.created_at)
    assert created is not None
    return ApiKeyRecord(id=row.id, name=row.name, prefix=row.prefix, created_at=created,
                        revoked=row.revoked)
