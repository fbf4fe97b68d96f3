"""Search: ask/tell tuners, their registry, and the tuning loop that drives them."""
from autotune.search.base import Tuner, TuningTask
from autotune.search.loop import DEFAULT_BATCH_SIZE, Executor, TrialStore, tune_loop
from autotune.search.options import Option
from autotune.search.registry import (
                                      DEFAULT_TUNER,
                                      TUNERS,
                                      describe_tuners,
                                      make_tuner,
                                      tuner_class,
                                      tuner_options,
)
from autotune.search.result import Progress, TuneResult
from autotune.search.retime import Retimed
from autotune.search.session import TuningSession
from autotune.search.store import ProgressSink, SearchStore

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_TUNER",
    "TUNERS",
    "Executor",
    "Option",
    "ProgressSink",
    "SearchStore",
    "Progress",
    "Retimed",
    "TrialStore",
    "TuneResult",
    "Tuner",
    "TuningSession",
    "TuningTask",
    "describe_tuners",
    "make_tuner",
    "tune_loop",
    "tuner_class",
    "tuner_options",
]
