"""Measurement: typed inputs/results, builders, runners, executors.

Tuners talk to an ``Executor`` only; ``LocalExecutor`` builds in a pool of spawned
processes and times in one device-owning process (docs/architecture.md, "Measurement").
"""
from autotune.measure.builder import LocalBuilder
from autotune.measure.executor import BatchStats, Executor, LocalExecutor
from autotune.measure.options import MeasureOptions
from autotune.measure.result import (
    ErrorKind,
    MeasureInput,
    MeasureResult,
    MeasureStopped,
    MeasureUnavailable,
)
from autotune.measure.runner import LocalRunner

__all__ = [
    "BatchStats",
    "ErrorKind",
    "Executor",
    "LocalBuilder",
    "LocalExecutor",
    "LocalRunner",
    "MeasureInput",
    "MeasureOptions",
    "MeasureResult",
    "MeasureStopped",
    "MeasureUnavailable",
]
