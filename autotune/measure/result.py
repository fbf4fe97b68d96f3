"""Typed measurement records: what goes into a measurement and what comes out."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

if TYPE_CHECKING:  # imported for annotations only; keeps this module dependency-free
    from autotune.ops import Workload
    from autotune.space import Config
    from autotune.target import Target


class MeasureUnavailable(RuntimeError):
    """The measuring processes themselves cannot run (a worker never starts): no config's
    fault, so it stops the job instead of being recorded as every candidate's failure."""


class MeasureStopped(RuntimeError):
    """A batch given up because its job must stop (cancelled, its lease lost, the service
    shutting down): its candidates have no results, and the processes busy with them were
    killed (the next batch starts fresh ones)."""


# A job's "must I stop now?" (`Executor.for_job`'s ``should_stop``); None: never.
ShouldStop = Optional[Callable[[], bool]]
# How often a stoppable wait asks it: a cancel stops the measuring within this.
STOP_POLL_S = 0.2


def check_stop(should_stop: ShouldStop, what: str) -> None:
    """Raise `MeasureStopped` (saying ``what`` was given up) once ``should_stop`` says so."""
    if should_stop is not None and should_stop():
        raise MeasureStopped(f"the job must stop: {what} given up")


class ErrorKind(str, Enum):
    """Why a measurement has no valid cost (NONE: it has one)."""

    NONE = "none"
    INSTANTIATION = "instantiation"  # the config is invalid for the workload/target
    COMPILE = "compile"
    RUNTIME = "runtime"
    WRONG_ANSWER = "wrong_answer"
    BUILD_TIMEOUT = "build_timeout"
    RUN_TIMEOUT = "run_timeout"
    # Not the config's verdict: the measuring process was lost twice to something outside
    # it (SIGKILL by the OOM killer or an operator, a setup timeout). A later job may
    # measure the config again; best() and the tuners ignore such records.
    TRANSIENT = "transient"

    @classmethod
    def known(cls, value: Any) -> "ErrorKind":
        """The kind named ``value``; RUNTIME for a name this version does not know (a record
        of a newer version): still a failure, never mistaken for a valid measurement."""
        try:
            return cls(str(value))
        except ValueError:
            return cls.RUNTIME


@dataclass(frozen=True)
class MeasureInput:
    """One candidate to measure: a point of a workload's space on a target."""

    workload: "Workload"
    target: "Target"
    config: "Config"


@dataclass(frozen=True)
class MeasureResult:
    """Outcome of one measurement; failures are data, never exceptions.

    ``costs`` holds every repeat's seconds per call; ``cost`` is their median.
    ``extra`` carries backend details (e.g. ptxas registers, spills) as JSON-able values.
    """

    costs: tuple[float, ...]
    error: ErrorKind = ErrorKind.NONE
    error_msg: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    timestamp: float = field(default_factory=time.time)
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is ErrorKind.NONE and bool(self.costs)

    @property
    def transient(self) -> bool:
        """Whether this failure says nothing about the config (see ErrorKind.TRANSIENT)."""
        return self.error is ErrorKind.TRANSIENT

    @property
    def cost(self) -> float:
        """Median seconds per call, or +inf when the measurement failed."""
        return statistics.median(self.costs) if self.ok else float("inf")

    @classmethod
    def from_record(cls, record: Any) -> "MeasureResult":
        """The result a stored trial (a `autotune.db.TrialRecord`) records."""
        return cls(costs=tuple(record.costs), error=ErrorKind.known(record.error),
                   error_msg=record.error_msg, build_s=record.build_s, run_s=record.run_s,
                   timestamp=record.timestamp, extra=dict(record.extra))

    @classmethod
    def failure(cls, error: ErrorKind, msg: str, *, build_s: float = 0.0, run_s: float = 0.0,
                extra: Mapping[str, Any] | None = None) -> "MeasureResult":
        return cls(costs=(), error=error, error_msg=msg[:4000], build_s=build_s, run_s=run_s,
                   extra=dict(extra or {}))
