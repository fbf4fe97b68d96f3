"""`JobOptions`: how one job tunes, the one typed contract that the library (`autotune.tune`),
the command line, the REST service, model runs and the service's job manager build and read;
and `MEASURE_BOUNDS`, the one table of the measurement options' bounds.

A job row keeps ``tuner`` and ``trials`` in columns and the rest in its options column, as
`JobOptions.to_json` writes it; `JobOptions.from_row` reads it back (a row written before a
field existed reads with its default). Every number is bounded here, and a bad value is a
`ValueError` naming the field (``measure_options.run_timeout``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping, Optional, Union

Number = Union[int, float]

# Small batches mean frequent model updates: in replay over 30 seeds (benchmarks/tuning.py
# pools), xgb needed 33/25.5/44.5 median trials to 90% on matmul/conv2d/depthwise with
# batches of 8, against 39/30.5/54.5 with 16. Eight still keeps 2 build workers busy; on a
# host with many build workers pass a larger batch_size.
DEFAULT_BATCH_SIZE = 8
MAX_TRIALS = 100_000
MAX_BATCH_SIZE = 4096
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class Bound:
    """The inclusive range of one numeric option, its type, and what it means."""

    kind: type  # int or float
    minimum: Number
    maximum: Number
    description: str

    def check(self, name: str, value: Any) -> Number:
        """``value`` as ``kind``; a ValueError naming ``name`` when it is not one in range
        (bool is no number; NaN and infinities are out of every range)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or (self.kind is int and not isinstance(value, int)):
            what = "an integer" if self.kind is int else "a number"
            raise ValueError(f"{name} must be {what}, got {type(value).__name__} {value!r:.40}")
        number = value if self.kind is int else _as_float(value)
        if not (self.minimum <= number <= self.maximum):  # NaN fails both
            raise ValueError(f"{name} must be between {self.minimum:g} and {self.maximum:g}, "
                             f"got {value!r:.40}")
        return number


def _as_float(value: Number) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond any float
        return math.inf


# The measurement options (`autotune.measure.MeasureOptions`' numbers). Each bound keeps
# every timer it feeds safe: timeouts are waited for with poll(2) in milliseconds, a C int
# (past 2**31 ms, 24.8 days, Python raises OverflowError), and a run's timing protocol
# (warm-up, growing `number` until a repeat lasts min_repeat_ms, then at least one repeat)
# must fit its run_timeout whatever the other options: growing takes up to about 1.5
# repeats, so the largest min_repeat_ms (0.2 s) takes about 0.5 s of the smallest
# run_timeout (1 s), room for a moment twice as slow. More repeats stop at the run budget
# (`run_worker`) and only store more costs, at most `repeat` of them.
MEASURE_BOUNDS: Mapping[str, Bound] = MappingProxyType({
    "repeat": Bound(int, 1, 100, "timed repeats per config; the cost is their median"),
    "number": Bound(int, 1, 10_000, "calls per repeat to start from (grown until a repeat "
                                    "lasts min_repeat_ms)"),
    "min_repeat_ms": Bound(float, 0.0, 200.0, "grow `number` until one repeat lasts this "
                                              "many milliseconds"),
    "build_timeout": Bound(float, 1.0, 600.0, "seconds one build may take"),
    "run_timeout": Bound(float, 1.0, 600.0, "seconds one config's timing may take"),
    # library only (`MeasureOptions`); the service's host decides these
    "warmup": Bound(int, 0, 100, "untimed calls before timing"),
    "n_build_workers": Bound(int, 1, 1024, "build processes"),
    "rtol": Bound(float, 0.0, 1.0, "relative tolerance of the correctness check"),
    "atol": Bound(float, 0.0, 1.0, "absolute tolerance of the correctness check"),
    "seed": Bound(int, 0, MAX_SEED, "seed of the inputs"),
})


@dataclass(frozen=True)
class MeasureOverrides:
    """A job's own measurement options over the executor's settings of the same names
    (``AUTOTUNE_REPEAT``, ...; None: the settings'). These are the options of
    ``measure_options`` in the REST API, and the job row's."""

    repeat: Optional[int] = None
    number: Optional[int] = None
    min_repeat_ms: Optional[float] = None
    build_timeout: Optional[float] = None
    run_timeout: Optional[float] = None

    def __post_init__(self) -> None:
        for name, value in self.given().items():
            object.__setattr__(self, name,
                               MEASURE_BOUNDS[name].check(f"measure_options.{name}", value))

    def given(self) -> dict[str, Number]:
        """The options set (name -> value): the stored JSON, and the executor's key."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    @classmethod
    def from_mapping(cls, values: Optional[Mapping[str, Any]]) -> "MeasureOverrides":
        """From a ``measure_options`` object; ValueError naming an unknown option."""
        values = dict(values or {})
        unknown = sorted(set(values) - set(MEASURE_FIELDS))
        if unknown:
            raise ValueError(f"measure_options.{unknown[0]}: unknown measurement option; "
                             f"known: {', '.join(MEASURE_FIELDS)}")
        return cls(**values)


# The job-level measurement options: fields of MeasureOverrides, of `Settings` and of
# `MeasureOptions` alike.
MEASURE_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MeasureOverrides))


@dataclass(frozen=True)
class JobOptions:
    """How a job tunes: its tuner and budget (``trials``), batch size, seed, early stopping,
    transfer, the tuner's options and its measurement options; ``model_run`` and ``weight``
    for a model run's task job (see `autotune.frontend.tuning`)."""

    tuner: str
    trials: int
    batch_size: int = DEFAULT_BATCH_SIZE
    seed: int = 0
    early_stopping: Optional[int] = None
    transfer: bool = True
    tuner_options: Mapping[str, Any] = field(default_factory=dict)
    measure: MeasureOverrides = field(default_factory=MeasureOverrides)
    model_run: Optional[int] = None
    weight: Optional[int] = None

    def __post_init__(self) -> None:
        _within("trials", self.trials, 0, MAX_TRIALS)
        _within("batch_size", self.batch_size, 1, MAX_BATCH_SIZE)
        _within("seed", self.seed, 0, MAX_SEED)
        if self.early_stopping is not None:
            _within("early_stopping", self.early_stopping, 1, MAX_TRIALS)
        object.__setattr__(self, "tuner_options", MappingProxyType(dict(self.tuner_options)))

    def to_json(self) -> dict[str, Any]:
        """The job row's options column (tuner and trials are columns of their own)."""
        out: dict[str, Any] = {"batch_size": self.batch_size, "seed": self.seed,
                               "early_stopping": self.early_stopping, "transfer": self.transfer,
                               "tuner_options": dict(self.tuner_options),
                               "measure_options": self.measure.given()}
        if self.model_run is not None:
            out.update(model_run=self.model_run, weight=self.weight)
        return out

    @classmethod
    def from_row(cls, tuner: str, trials: int, options: Mapping[str, Any]) -> "JobOptions":
        """The options of a job row. Older rows lack fields (they read with the default);
        rows the library wrote before this contract kept every `MeasureOptions` field in
        ``measure_options``: only the job-level ones (`MEASURE_FIELDS`) are read. A value
        out of its bounds is a ValueError naming it."""
        measure = options.get("measure_options") or {}
        return cls(tuner=tuner, trials=trials,
                   batch_size=int(options.get("batch_size") or DEFAULT_BATCH_SIZE),
                   seed=int(options.get("seed") or 0),
                   early_stopping=options.get("early_stopping"),
                   transfer=bool(options.get("transfer", True)),
                   tuner_options=dict(options.get("tuner_options") or {}),
                   measure=MeasureOverrides.from_mapping(
                       {k: v for k, v in measure.items() if k in MEASURE_FIELDS}),
                   model_run=options.get("model_run"), weight=options.get("weight"))


def _within(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer between {low} and {high}, got {value!r:.40}")
