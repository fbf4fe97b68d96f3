"""Records that leave the database layer, and the duck types it accepts from callers."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping, Optional, Protocol, Union

from autotune.db.schema import ApiKeyRow, JobRow, TrialRow


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


class HasKey(Protocol):
    @property
    def key(self) -> str: ...


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
class TrialRecord:
    """One measured config of a workload on a target (cost and gflops None when it failed)."""

    workload_key: str
    target_key: str
    config: dict[str, Any]
    config_index: int
    costs: tuple[float, ...]
    cost: Optional[float]
    gflops: Optional[float]
    error: str
    error_msg: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    timestamp: float = 0.0
    job_id: Optional[int] = None
    extra: dict[str, Any] = field(default_factory=dict)
    id: Optional[int] = None
    worker: Optional[str] = None  # who measured it (a worker id), when known
    # Its figure in the latest accepted re-timing window of its workload and target, when it
    # was one of that window's members (``cost`` stays the first measurement's).
    retimed_cost: Optional[float] = None

    @property
    def ok(self) -> bool:
        return self.error == "none" and self.cost is not None

    @property
    def ranked_cost(self) -> Optional[float]:
        """The figure it is ranked by (`autotune.db.trials.top`): the re-timed one when it
        has one, else its first measurement's."""
        return self.retimed_cost if self.retimed_cost is not None else self.cost

    @property
    def ranked_gflops(self) -> Optional[float]:
        """GFLOP/s at `ranked_cost` (None when failed)."""
        if self.gflops is None or not self.cost or not self.ranked_cost:
            return None
        return self.gflops * self.cost / self.ranked_cost  # gflops = flops / cost / 1e9


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


@dataclass(frozen=True)
class ApiKeyRecord:
    """An API key as listed: never the key itself, only its display prefix."""

    id: int
    name: str
    prefix: str
    created_at: datetime
    revoked: bool


def _utc(value: Optional[datetime]) -> Optional[datetime]:
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
        created_at=_utc(row.created_at),  # type: ignore[arg-type]
        started_at=_utc(row.started_at),
        finished_at=_utc(row.finished_at),
        updated_at=_utc(row.updated_at),
        owner=row.owner,
        lease_expires_at=_utc(row.lease_expires_at),
        waiting=row.waiting,
    )


def api_key_record(row: ApiKeyRow) -> ApiKeyRecord:
    created = _utc(row.created_at)
    assert created is not None
    return ApiKeyRecord(id=row.id, name=row.name, prefix=row.prefix, created_at=created,
                        revoked=row.revoked)
