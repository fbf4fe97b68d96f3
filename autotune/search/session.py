"""`TuningSession`: one tuning job's search, stepped from outside (TVM's generate/notify):
`next_batch()` proposes the candidates to measure, `record(results)` takes what they gave,
`finish(executor)` re-times the top candidates and returns the result.

The session owns the trial budget, early stopping, de-duplication against the store, job
resumption and the final re-timing; tuners only choose and executors only measure, and
whoever steps the session decides when (`tune_loop` drives it batch after batch; a model
run takes turns between its tasks' sessions). A transient result (`ErrorKind.TRANSIENT`:
the measuring process was lost, not the config's fault) counts as a trial of the job but
teaches the tuner nothing, and a later job may measure that config again.

After each refit, a tuner with a model (`Tuner.model_scores`) scores the job's valid trials
(at most MODEL_SCORES_CAP of them), and the store keeps them on the job
(`ProgressSink.set_job_model_scores`), replacing the last refit's: the dashboard plots them
against the measured GFLOP/s, one model version on one scale.
"""
from __future__ import annotations

import dataclasses
import heapq
import logging
import math
import time
from collections import Counter
from contextlib import nullcontext
from functools import partial
from types import MappingProxyType
from typing import (
    TYPE_CHECKING,
    AbstractSet,
    Any,
    Callable,
    ContextManager,
    Mapping,
    Optional,
    Sequence,
    Union,
)

from autotune.job_options import DEFAULT_BATCH_SIZE
from autotune.measure.executor import Executor
from autotune.measure.result import ErrorKind, MeasureInput, MeasureResult, MeasureStopped
from autotune.ops import Workload
from autotune.records import TrialRecord
from autotune.search.base import Tuner, TuningTask
from autotune.search.registry import DEFAULT_TUNER, make_tuner
from autotune.search.result import Progress, TuneResult
from autotune.search.retime import DEFAULT_RETIME, Candidate, Retimed, Standing, run_window
from autotune.search.store import JobStopped, TrialStore
from autotune.space import Config
from autotune.target import Target

if TYPE_CHECKING:
    from autotune.space import ConfigSpace

log = logging.getLogger(__name__)

# Most of a job's valid trials the current model scores after each refit: half of them the
# fastest, the rest the most recent. Scoring cached feature rows is milliseconds per
# thousand; the stored JSON (~40 bytes a config) stays under 100 KB.
MODEL_SCORES_CAP = 2000

TunerSpec = Union[str, Callable[..., Tuner]]


class _Tally:
    """Running totals of one loop: trials done, best valid config, errors, history."""

    def __init__(self, flops: int, done: int) -> None:
        self.flops, self.done = flops, done
        self.first_cost = float("inf")  # the fastest first measurement (search progress)
        self.first_config: Optional[Config] = None
        # The latest accepted re-timing window's winner (config, re-timed cost), if any:
        # the best by the one ranking until this loop's own window.
        self.retimed: Optional[tuple[Config, float]] = None
        self.valid: list[Candidate] = []  # re-timing candidates
        self.own: list[tuple[Config, float]] = []  # the job's valid trials, measurement order
        self.errors: Counter[str] = Counter()
        self.history: list[tuple[int, float, float]] = []
        self.since_best = 0

    def offer(self, config: Config, cost: float) -> bool:
        """Take ``config`` as the fastest first measurement if it is; whether it was."""
        if cost < self.first_cost:
            self.first_cost, self.first_config = cost, config
            return True
        return False

    def add(self, config: Config, result: MeasureResult) -> None:
        """Count one trial of this run."""
        self.done += 1
        if result.ok:
            self.valid.append(Candidate(config, tuple(result.costs)))
            self.own.append((config, result.cost))
        if result.ok and self.offer(config, result.cost):
            self.since_best = 0
        else:
            self.since_best += 1
        if not result.ok:
            self.errors[result.error.value] += 1
        gflops = self.flops / result.cost / 1e9 if result.ok and result.cost > 0 else 0.0
        self.history.append((self.done, gflops, self._gflops(self.first_cost)))

    def set_standing(self, standing: Standing) -> None:
        """Take the ranking's answer after re-timing."""
        self.retimed = ((standing.config, standing.cost)
                        if standing.retimed and standing.config is not None else None)
        if not standing.retimed:
            self.first_cost, self.first_config = standing.cost, standing.config

    @property
    def config(self) -> Optional[Config]:
        """The best config by the one ranking (`autotune.db.trials.top`)."""
        return self.retimed[0] if self.retimed is not None else self.first_config

    @property
    def cost(self) -> float:
        return self.retimed[1] if self.retimed is not None else self.first_cost

    @property
    def gflops(self) -> float:
        return self._gflops(self.cost)

    def _gflops(self, cost: float) -> float:
        return self.flops / cost / 1e9 if 0 < cost < float("inf") else 0.0


class TuningSession:
    """One job's search over ``space``, for ``trials`` measurements, stepped by its caller.

    With ``db``, configs recorded for this workload and target are never measured again and
    feed the tuner first; with ``job_id`` too, the job's recorded trials count toward its
    budget. ``early_stopping``: stop after that many trials without a new best (None: off).
    ``tuner``: a name in TUNERS or a Tuner class; ``pool``: replay mode (see `Tuner`).
    ``host_work`` is held while the session computes on the host (`Executor.host_work`).
    Close it (or use it as a context manager) to let go of the tuner's workers.
    """

    def __init__(self, workload: Workload, target: Target, space: "ConfigSpace", *, trials: int,
                 tuner: TunerSpec = DEFAULT_TUNER,
                 tuner_options: Optional[Mapping[str, Any]] = None, seed: int = 0,
                 db: Optional[TrialStore] = None, batch_size: int = DEFAULT_BATCH_SIZE,
                 early_stopping: Optional[int] = None, job_id: Optional[int] = None,
                 pool: Optional[AbstractSet[int]] = None,
                 host_work: Callable[[], ContextManager[Any]] = nullcontext) -> None:
        if trials < 0 or batch_size < 1:
            raise ValueError(f"tune: need trials >= 0 and batch_size >= 1; got {trials}, "
                             f"{batch_size}")
        if early_stopping is not None and early_stopping < 1:
            raise ValueError(f"tune: early_stopping must be >= 1 or None; got {early_stopping}")
        self.workload, self.target, self.space, self.db = workload, target, space, db
        self.trials, self.batch_size, self.early_stopping = trials, batch_size, early_stopping
        self.job_id, self.host_work = job_id, host_work
        self.stopped: Optional[str] = None  # why it stopped proposing; None while it goes on
        prior = list(db.trials_for(workload, target)) if db is not None else []
        factory = partial(make_tuner, tuner) if isinstance(tuner, str) else tuner
        # A transient record is no verdict: measured again, except by the job that wrote it
        # (which has spent a trial on it already).
        measured = {r.config_index for r in prior
                    if not _is_transient(r) or (job_id is not None and r.job_id == job_id)}
        with host_work():  # (a tuner may fit a transfer model on the history here)
            self.tuner = factory(space, seed=seed, measured=measured, pool=pool,
                                 task=TuningTask(workload, target, db),
                                 **dict(tuner_options or {}))
        self.start = sum(1 for r in prior if r.job_id == job_id) if job_id is not None else 0
        self.tally = _Tally(int(workload.flops()), self.start)
        self._pending: list[Config] = []
        self._t0: Optional[float] = None
        self._closed = False
        try:
            with host_work():
                _replay_history(self.tuner, self.tally, workload, target, space, prior, job_id)
        except BaseException:
            self.tuner.close()
            raise

    @property
    def trials_done(self) -> int:
        """Trials of the job so far (its recorded ones included)."""
        return self.tally.done

    def next_batch(self, at_least: int = 0) -> list[MeasureInput]:
        """The next candidates to measure (``batch_size``, or ``at_least`` when larger, within
        the budget); empty once the session stops (see ``stopped``)."""
        if self._pending:
            raise RuntimeError("record() the last batch's results before the next batch")
        if self.stopped is not None:
            return []
        tally = self.tally
        if tally.done >= self.trials:
            self.stopped = "budget"
            return []
        if self.early_stopping is not None and tally.since_best >= self.early_stopping:
            self.stopped = "early_stopping"
            return []
        if self._t0 is None:
            self._t0 = time.perf_counter()
        n = min(max(self.batch_size, at_least), self.trials - tally.done)
        with self.host_work():
            configs = self.tuner.next_batch(n) if self.tuner.has_next() else []
        if not configs:
            self.stopped = "exhausted"
            return []
        self._pending = list(configs)
        return [MeasureInput(self.workload, self.target, c) for c in configs]

    def record(self, results: Sequence[MeasureResult]) -> Progress:
        """Take the measurements of the last batch (in its order): teach the tuner, write
        them to the store, follow the job; returns the progress after them."""
        configs, self._pending = self._pending, []
        results = list(results)
        if len(results) != len(configs):
            raise RuntimeError(f"executor returned {len(results)} results for "
                               f"{len(configs)} inputs")
        tally, db, job_id = self.tally, self.db, self.job_id
        learnt = [(c, r) for c, r in zip(configs, results) if not r.transient]
        if learnt:
            with self.host_work():
                self.tuner.update([MeasureInput(self.workload, self.target, c)
                                   for c, _ in learnt], [r for _, r in learnt])
        batch = tally.done
        results = [_with_prediction(r, self.tuner.predicted(c), batch)
                   for c, r in zip(configs, results)]
        if db is not None:
            db.add_trials(self.workload, self.target, job_id, list(zip(configs, results)),
                          tally.flops)
        for cfg, res in zip(configs, results):
            tally.add(cfg, res)
        if learnt:  # the model was refit: its scores of the job's trials replace the last
            _store_model_scores(db, job_id, self.tuner, tally, batch, self.host_work)
        _report(db, job_id, tally)
        return Progress(tally.done, self.trials, tally.gflops, tally.config,
                        sum(tally.errors.values()), tuple(zip(configs, results)), job_id,
                        time.perf_counter() - (self._t0 or time.perf_counter()))

    def stop(self, reason: str) -> None:
        """Propose nothing more (``reason``: "callback" skips the final re-timing)."""
        self.stopped = reason

    def finish(self, executor: Executor, retime: int = DEFAULT_RETIME) -> TuneResult:
        """Close the tuner, re-time the top candidates on ``executor`` (unless stopped by a
        callback or ``retime`` is 0) and return the result. A job that must stop during its
        window (`MeasureStopped`, or `JobStopped` from the store) ends it unwritten, as
        stopped by a callback."""
        self.close()
        tally = self.tally
        retimed: tuple[Retimed, ...] = ()
        if self.stopped != "callback" and retime > 0:
            try:
                retimed = _retime(self.workload, self.target, self.space, executor, self.db,
                                  tally, retime)
                _report(self.db, self.job_id, tally)
            except (MeasureStopped, JobStopped):  # the job ended during its window
                self.stopped = "callback"
        default = self.space.default()
        return TuneResult(tally.config, tally.cost, tally.gflops, tally.done - self.start,
                          tuple(tally.history), MappingProxyType(dict(tally.errors)),
                          self.stopped or "budget", self.job_id, retimed, int(default.index),
                          _default_cost(default, tally, retimed), tally.retimed is not None)

    def close(self) -> None:
        """Let go of the tuner's worker processes (once, however often it is called)."""
        if not self._closed:
            self._closed = True
            self.tuner.close()

    def __enter__(self) -> "TuningSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _report(db: Optional[TrialStore], job_id: Optional[int], tally: _Tally) -> None:
    if db is not None and job_id is not None:
        db.update_job_progress(job_id, trials_done=tally.done, best_gflops=tally.gflops or None)


def _store_model_scores(db: Optional[TrialStore], job_id: Optional[int], tune: Tuner,
                        tally: _Tally, batch: int,
                        host_work: Callable[[], ContextManager[Any]]) -> None:
    """Score the job's valid trials (`_to_score`) with the tuner's current model and keep
    them on the job as {config_key: score} (the trials' ``config_key``: the config index in
    decimal), with ``batch`` (the job's trials before the batch the model was last fit
    after, as in ``extra["batch"]``) and ``trials`` (the job's trials by then).

    Nothing happens without a job, a store, or a model (random, ga, grid; xgb before its
    first fit). The scores are only a view of the model: a tuner
    failing to score is logged, not raised (a lost lease still is, as for every write).
    """
    if db is None or job_id is None or not tally.own:
        return
    configs = _to_score(tally.own, MODEL_SCORES_CAP)
    try:
        with host_work():
            scores = tune.model_scores(configs)
    except Exception:  # a view of the model must not stop the job
        log.warning("job %s: the tuner failed to score its trials", job_id, exc_info=True)
        return
    if scores is None:
        return
    # -inf (cannot score) and NaN have no JSON form; such a config is left out
    kept = {str(int(c.index)): float(v) for c, v in zip(configs, scores) if math.isfinite(v)}
    db.set_job_model_scores(job_id, batch=batch, trials=tally.done, scores=kept)


def _to_score(own: Sequence[tuple[Config, float]], cap: int) -> list[Config]:
    """The configs of ``own`` ((config, cost) in measurement order), or at most ``cap`` of
    them: the ``cap // 2`` fastest and the most recent of the rest."""
    if len(own) <= cap:
        return [c for c, _ in own]
    keep = set(heapq.nsmallest(cap // 2, range(len(own)), key=lambda i: own[i][1]))
    i = len(own) - 1
    while len(keep) < cap:
        keep.add(i)
        i -= 1
    return [own[i][0] for i in sorted(keep)]


def _is_transient(record: TrialRecord) -> bool:
    return record.error == ErrorKind.TRANSIENT.value


def _config_of(space: "ConfigSpace", record: TrialRecord) -> Optional[Config]:
    """The record's config in this space, or None when the space has changed since."""
    try:
        return Config.from_json(record.config, space)
    except (ValueError, IndexError, TypeError):
        return None


def _replay_history(tune: Tuner, tally: _Tally, workload: Workload, target: Target,
                    space: "ConfigSpace", prior: Sequence[TrialRecord],
                    job_id: Optional[int]) -> None:
    """Tell the tuner what earlier runs measured, and start the tally from their best (and
    its list of the job's valid trials and its error counts from the job's own records, so
    that a resumed job reports the errors recorded before its restart)."""
    inputs, results = [], []
    for record in prior:
        own = job_id is not None and record.job_id == job_id
        if own and str(record.error) != ErrorKind.NONE.value:
            tally.errors[str(record.error)] += 1
        if _is_transient(record):  # says nothing about the config
            continue
        cfg = _config_of(space, record)
        if cfg is None:
            continue
        res = MeasureResult.from_record(record)
        inputs.append(MeasureInput(workload, target, cfg))
        results.append(res)
        if res.ok:
            tally.offer(cfg, res.cost)
            tally.valid.append(Candidate(cfg, tuple(res.costs)))
            if own:
                tally.own.append((cfg, res.cost))
            retimed = record.retimed_cost
            if retimed is not None and (tally.retimed is None or retimed < tally.retimed[1]):
                tally.retimed = (cfg, float(retimed))
    if inputs:
        tune.update(inputs, results)


def _retime(workload: Workload, target: Target, space: "ConfigSpace", executor: Executor,
            db: Optional[TrialStore], tally: _Tally, k: int) -> tuple[Retimed, ...]:
    """Re-time the best config so far with the top candidates (`autotune.search.retime`),
    on one device (`Executor.pinned`). The re-runs are not trials: budget and history are
    unchanged. The store keeps each window (a config that crashed or answered wrong stops
    being valid), and the tally takes the store's best afterwards, so the job's best is
    `best()`'s (a store that keeps no windows knows no best: the window's answer stands)."""
    incumbent = None
    if tally.retimed is not None:
        incumbent = (_candidate(tally, tally.retimed[0]), tally.retimed[1])
    if db is not None:  # another job may have re-timed since this loop began
        incumbent = _incumbent(db.best(workload, target), space, tally) or incumbent

    def write(members: Sequence[Retimed], accepted: bool) -> None:
        if db is not None:
            db.record_retiming(workload, target, members, accepted=accepted)

    with executor.pinned() as one_device:
        out, standing = run_window(workload, target, one_device, tally.valid, incumbent,
                                    k, write, default=space.default())
    tally.set_standing(standing)
    if db is not None:
        found = db.best(workload, target)
        cfg = _config_of(space, found) if found is not None else None
        if found is not None and cfg is not None and found.ranked_cost is not None:
            tally.set_standing(Standing(cfg, found.ranked_cost, found.retimed_cost is not None))
    return out


def _default_cost(default: Config, tally: _Tally, window: Sequence[Retimed]
                  ) -> Optional[float]:
    """The default config's figure on the best's footing: re-timed when the window that
    ranks the best holds it, else its first measurement (None: no valid record)."""
    if tally.config is not None and tally.config.index == default.index:
        return tally.cost
    member = next((r for r in window if r.config_index == default.index), None)
    if member is not None and member.disqualified:
        return None  # a round crashed or answered wrong: its record is failed now
    if (member is not None and member.status == "ok" and tally.retimed is not None
            and member.retimed_cost is not None):
        return member.retimed_cost
    first = [c.first_cost for c in tally.valid if c.config.index == default.index]
    return first[0] if first else None


def _candidate(tally: _Tally, config: Config) -> Candidate:
    """The re-timing candidate of ``config`` (its first measurement)."""
    return next(c for c in tally.valid if c.config.index == config.index)


def _incumbent(record: Optional[TrialRecord], space: "ConfigSpace", tally: _Tally
               ) -> Optional[tuple[Candidate, float]]:
    """(candidate, re-timed cost) of the store's best record when a window ranked it."""
    if record is None or record.retimed_cost is None:
        return None
    cfg = _config_of(space, record)
    if cfg is None:
        return None
    known = [c for c in tally.valid if c.config.index == cfg.index]
    first = known[0] if known else Candidate(cfg, tuple(record.costs))
    return first, float(record.retimed_cost)


def _with_prediction(result: MeasureResult, score: Optional[float], batch: int) -> MeasureResult:
    """Keep the model's score with the trial, and its batch (the job's trials before it): the
    model is refit between batches, so scores compare only within one (the dashboard's rank
    correlation per batch)."""
    if score is None:
        return result
    return dataclasses.replace(result, extra={**result.extra, "predicted": float(score),
                                              "batch": batch})
