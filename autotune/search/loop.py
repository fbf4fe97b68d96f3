"""`tune_loop`: the batch after batch driver of a `TuningSession`: ask it for candidates,
measure them on an executor, hand the results back, call the callbacks; then re-time."""
from __future__ import annotations

from typing import TYPE_CHECKING, AbstractSet, Any, Callable, Iterable, Mapping, Optional

from autotune.measure.executor import Executor
from autotune.measure.result import MeasureStopped
from autotune.ops import Workload
from autotune.search.registry import DEFAULT_TUNER
from autotune.search.result import Progress, TuneResult
from autotune.search.retime import DEFAULT_RETIME
from autotune.search.session import DEFAULT_BATCH_SIZE, TunerSpec, TuningSession
from autotune.search.store import JobStopped, TrialStore
from autotune.target import Target

if TYPE_CHECKING:
    from autotune.space import ConfigSpace

Callback = Callable[[Progress], Optional[bool]]

__all__ = ["DEFAULT_BATCH_SIZE", "Callback", "Executor", "TrialStore", "drive", "tune_loop"]


def tune_loop(workload: Workload, target: Target, space: "ConfigSpace", executor: Executor, *,
              trials: int, tuner: TunerSpec = DEFAULT_TUNER,
              tuner_options: Optional[Mapping[str, Any]] = None, seed: int = 0,
              db: Optional[TrialStore] = None, batch_size: int = DEFAULT_BATCH_SIZE,
              early_stopping: Optional[int] = None, job_id: Optional[int] = None,
              callbacks: Iterable[Callback] = (), pool: Optional[AbstractSet[int]] = None,
              retime: int = DEFAULT_RETIME) -> TuneResult:
    """Tune ``workload`` on ``target`` for ``trials`` measurements on ``executor`` (the
    arguments are `TuningSession`'s). After each batch every callback runs; one returning
    False stops at once, without re-timing."""
    with TuningSession(workload, target, space, trials=trials, tuner=tuner,
                       tuner_options=tuner_options, seed=seed, db=db, batch_size=batch_size,
                       early_stopping=early_stopping, job_id=job_id, pool=pool,
                       host_work=executor.host_work) as session:
        return drive(session, executor, callbacks, retime)


def drive(session: TuningSession, executor: Executor, callbacks: Iterable[Callback] = (),
          retime: int = DEFAULT_RETIME) -> TuneResult:
    """Step ``session`` batch after batch on ``executor`` until it stops, calling every
    callback after each batch (one returning False stops it, without re-timing); then
    finish it (re-timing)."""
    callbacks = tuple(callbacks)
    try:
        while inputs := session.next_batch(executor.preferred_batch()):
            progress = session.record(executor.submit(inputs))
            if any([cb(progress) is False for cb in callbacks]):  # a list: every one runs
                session.stop("callback")
                break
    except (MeasureStopped, JobStopped):  # the job ended, its batch given up or refused
        session.stop("callback")
    return session.finish(executor, retime)
