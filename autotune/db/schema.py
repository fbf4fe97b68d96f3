"""ORM tables of the tuning database (the migrations in ``migrations/`` create them)."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Job states, in lifecycle order; the terminal ones never change again.
JOB_STATES = ("queued", "running", "done", "failed", "cancelled")
TERMINAL_STATES = frozenset({"done", "failed", "cancelled"})

# SQLite only auto-increments INTEGER PRIMARY KEY, so ids are BIGINT elsewhere only.
IdType = BigInteger().with_variant(Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    # Explicit constraint names, so the migrations can name (and later alter) them.
    metadata = MetaData(naming_convention={
        "ix": "ix_%(column_0_label)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s",
    })


class WorkloadRow(Base):
    __tablename__ = "workloads"

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    key: Mapped[str] = mapped_column(Text, unique=True)
    op: Mapped[str] = mapped_column(String(64), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class TargetRow(Base):
    __tablename__ = "targets"

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    key: Mapped[str] = mapped_column(Text, unique=True)
    kind: Mapped[str] = mapped_column(String(32), index=True)


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    workload_id: Mapped[int] = mapped_column(IdType, ForeignKey("workloads.id"), index=True)
    target_id: Mapped[int] = mapped_column(IdType, ForeignKey("targets.id"), index=True)
    tuner: Mapped[str] = mapped_column(String(32))
    trials: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), index=True, default="queued")
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[Optional[str]] = mapped_column(Text)
    best_gflops: Mapped[Optional[float]] = mapped_column(Float)
    trials_done: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # The process running the job ("host:pid:token"), NULL when none; another process may
    # take the job over once ``lease_expires_at`` is past (see jobs.claim_job).
    owner: Mapped[Optional[str]] = mapped_column(String(200), index=True)
    lease_expires_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))
    # Why a claimed job waits (state 'queued', owner kept), e.g. no live worker for its target.
    waiting: Mapped[Optional[str]] = mapped_column(Text)
    # The model run the job tunes a task of (autotune.tune_model), NULL for a standalone job.
    # No foreign key: adding one makes SQLite rebuild jobs, and dropping the old table nulls
    # every trials.job_id (ON DELETE SET NULL); model runs are never deleted.
    model_run_id: Mapped[Optional[int]] = mapped_column(IdType, index=True)
    # The tuner's current model's scores of the job's valid trials, replaced after each
    # refit (see `jobs.set_model_scores`): {"batch": trials before the batch it was fit
    # after, "trials": the job's trials by then, "scores": {config_key: score}}; NULL for
    # tuners without a model. Deferred: up to ~100 KB that only the job page's scatter reads.
    model_scores: Mapped[Optional[dict[str, Any]]] = mapped_column(JSON, deferred=True)


class ModelRunRow(Base):
    """A model tuned as a whole: its tasks share one budget; each task's trials are a job."""

    __tablename__ = "model_runs"

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    # Resume key: the hash of the task set (workloads and weights); see ModelTasks.fingerprint.
    fingerprint: Mapped[str] = mapped_column(String(64), index=True)
    target_id: Mapped[int] = mapped_column(IdType, ForeignKey("targets.id"), index=True)
    budget: Mapped[int] = mapped_column(Integer)
    trials_done: Mapped[int] = mapped_column(Integer, default=0)
    state: Mapped[str] = mapped_column(String(16), index=True, default="running")
    tasks: Mapped[list[Any]] = mapped_column(JSON, default=list)
    unsupported: Mapped[list[Any]] = mapped_column(JSON, default=list)
    # [seconds since the run began, trials spent, estimated latency in s or null] per round.
    history: Mapped[list[Any]] = mapped_column(JSON, default=list)
    estimated_latency_s: Mapped[Optional[float]] = mapped_column(Float)
    owner: Mapped[Optional[str]] = mapped_column(String(200))
    error: Mapped[Optional[str]] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    finished_at: Mapped[Optional[datetime]] = mapped_column(DateTime(timezone=True))


class TrialRow(Base):
    __tablename__ = "trials"
    __table_args__ = (
        # A config is measured once per workload and target, ever.
        UniqueConstraint("workload_id", "target_id", "config_key", name="uq_trials_config"),
        # Serves "best valid record" and "top k": equality on the first three, cost ordered.
        Index("ix_trials_best", "workload_id", "target_id", "error", "cost"),
    )

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    workload_id: Mapped[int] = mapped_column(IdType, ForeignKey("workloads.id"))
    target_id: Mapped[int] = mapped_column(IdType, ForeignKey("targets.id"), index=True)
    job_id: Mapped[Optional[int]] = mapped_column(
        IdType, ForeignKey("jobs.id", ondelete="SET NULL"), index=True)
    # Decimal string: space indices can exceed 2**63, which no portable integer column holds.
    config_key: Mapped[str] = mapped_column(String(64))
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    costs: Mapped[list[float]] = mapped_column(JSON)
    cost: Mapped[Optional[float]] = mapped_column(Float)
    gflops: Mapped[Optional[float]] = mapped_column(Float)
    error: Mapped[str] = mapped_column(String(32), default="none")
    error_msg: Mapped[str] = mapped_column(Text, default="")
    build_s: Mapped[float] = mapped_column(Float, default=0.0)
    run_s: Mapped[float] = mapped_column(Float, default=0.0)
    timestamp: Mapped[float] = mapped_column(Float)
    extra: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Who measured it: the worker id of extra["measured_by"] (NULL in older records).
    worker: Mapped[Optional[str]] = mapped_column(String(200), index=True)
    # Median of the repeats of the latest accepted re-timing window of this workload and
    # target, for that window's members only (``cost`` stays the first measurement's);
    # see `autotune.db.trials.top` for the ranking it gives.
    retimed_cost: Mapped[Optional[float]] = mapped_column(Float)


class ApiKeyRow(Base):
    __tablename__ = "api_keys"

    id: Mapped[int] = mapped_column(IdType, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
