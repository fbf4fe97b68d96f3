"""`tune_loop`: ask the tuner, measure, record, repeat; then re-time the top candidates.

The loop owns batching, the trial budget, early stopping, de-duplication against the
database, job resumption, progress callbacks and the final re-timing. Tuners only choose.
A transient result (`ErrorKind.TRANSIENT`: the measuring process was lost, not the config's
fault) counts as a trial of the job but teaches the tuner nothing, and a later job may
measure that config again.

After each refit, a tuner with a model (`Tuner.model_scores`) scores the job's valid trials
(at most MODEL_SCORES_CAP of them), and a store that can (``set_job_model_scores``) keeps
them on the job, replacing the last refit's: the dashboard plots them against the measured
GFLOP/s, one model version on one scale.
"""
from __future__ import annotations

import dataclasses
import heapq
import logging
import math
import statistics
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
    Iterable,
    Mapping,
    Optional,
    Protocol,
    Sequence,
    Union,
)

from autotune.measure.executor import Executor
from autotune.measure.result import ErrorKind, MeasureInput, MeasureResult
from autotune.search.base import Tuner, TuningTask
from autotune.search.registry import DEFAULT_TUNER, make_tuner
from autotune.search.result import Progress, Retimed, TuneResult
from autotune.space import Config

if TYPE_CHECKING:
    from autotune.space import ConfigSpace

log = logging.getLogger(__name__)

# Small batches mean frequent model updates: in replay over 30 seeds (benchmarks/tuning.py
# pools), xgb needed 33/25.5/44.5 median trials to 90% on matmul/conv2d/depthwise with
# batches of 8, against 39/30.5/54.5 with 16. Eight still keeps 2 build workers busy; on a
# host with many build workers pass a larger batch_size.
DEFAULT_BATCH_SIZE = 8
# Top valid candidates timed once more at the end (timings vary between processes), and
# at most this many rounds of it while a config not yet re-timed would still win.
DEFAULT_RETIME = 3
RETIME_ROUNDS = 3

# Most of a job's valid trials the current model scores after each refit: half of them the
# fastest, the rest the most recent. Scoring cached feature rows is milliseconds per
# thousand; the stored JSON (~40 bytes a config) stays under 100 KB.
MODEL_SCORES_CAP = 2000

# Re-run failures that mean the kernel itself is broken, not the moment it ran in.
_DISQUALIFY = frozenset({ErrorKind.WRONG_ANSWER, ErrorKind.RUNTIME})

Callback = Callable[[Progress], Optional[bool]]
TunerSpec = Union[str, Callable[..., Tuner]]


def _host_work(executor: Executor) -> ContextManager[Any]:
    """``executor.host_work()`` when it has one, else nothing to hold."""
    hold = getattr(executor, "host_work", None)
    return hold() if hold is not None else nullcontext()


class TrialStore(Protocol):
    """The part of `autotune.db.Database` the loop uses (search sits below the db layer)."""

    def trials_for(self, workload: Any, target: Any) -> list[Any]: ...
    def add_trials(self, workload: Any, target: Any, job_id: Optional[int],
                   items: Sequence[tuple[Any, MeasureResult]], flops: int) -> int: ...
    def update_job_progress(self, job_id: int, *, trials_done: int,
                            best_gflops: Optional[float]) -> bool: ...
    # Optional, used when present: update_trial_costs (see `_retime`) and
    # set_job_model_scores(job_id, *, batch, trials, scores) (see `_store_model_scores`).


class _Tally:
    """Running totals of one loop: trials done, best valid config, errors, history."""

    def __init__(self, flops: int, done: int) -> None:
        self.flops, self.done = flops, done
        self.cost = float("inf")
        self.config: Optional[Config] = None
        self.valid: list[tuple[Config, tuple[float, ...]]] = []  # re-timing candidates
        self.own: list[tuple[Config, float]] = []  # the job's valid trials, measurement order
        self.errors: Counter[str] = Counter()
        self.history: list[tuple[int, float, float]] = []
        self.since_best = 0

    def offer(self, config: Config, cost: float) -> bool:
        """Take ``config`` as the best if it is faster; whether it was."""
        if cost < self.cost:
            self.cost, self.config = cost, config
            return True
        return False

    def add(self, config: Config, result: MeasureResult) -> None:
        """Count one trial of this run."""
        self.done += 1
        if result.ok:
            self.valid.append((config, tuple(result.costs)))
            self.own.append((config, result.cost))
        if result.ok and self.offer(config, result.cost):
            self.since_best = 0
        else:
            self.since_best += 1
        if not result.ok:
            self.errors[result.error.value] += 1
        gflops = self.flops / result.cost / 1e9 if result.ok and result.cost > 0 else 0.0
        self.history.append((self.done, gflops, self.gflops))

    @property
    def gflops(self) -> float:
        return self.flops / self.cost / 1e9 if 0 < self.cost < float("inf") else 0.0


def tune_loop(workload: Any, target: Any, space: "ConfigSpace", executor: Executor, *,
              trials: int, tuner: TunerSpec = DEFAULT_TUNER,
              tuner_options: Optional[Mapping[str, Any]] = None, seed: int = 0,
              db: Optional[TrialStore] = None, batch_size: int = DEFAULT_BATCH_SIZE,
              early_stopping: Optional[int] = None, job_id: Optional[int] = None,
              callbacks: Iterable[Callback] = (), pool: Optional[AbstractSet[int]] = None,
              retime: int = DEFAULT_RETIME) -> TuneResult:
    """Tune ``workload`` on ``target`` for ``trials`` measurements; see the module docstring.

    With ``db``, configs recorded for this workload and target are never measured again and
    feed the tuner first; with ``job_id`` too, the job's recorded trials count toward its
    budget. ``early_stopping``: stop after that many trials without a new best (None: off),
    checked after each batch. A callback returning False stops at once (no re-timing).
    ``tuner``: a name in TUNERS or a Tuner class. ``pool``: replay mode (see `Tuner`).
    """
    if trials < 0 or batch_size < 1:
        raise ValueError(f"tune: need trials >= 0 and batch_size >= 1; got {trials}, {batch_size}")
    if early_stopping is not None and early_stopping < 1:
        raise ValueError(f"tune: early_stopping must be >= 1 or None; got {early_stopping}")
    prior = list(db.trials_for(workload, target)) if db is not None else []
    factory = partial(make_tuner, tuner) if isinstance(tuner, str) else tuner
    host_work = _host_work(executor)  # (reusable: a lock or a nullcontext)
    # A transient record is no verdict: measured again, except by the job that wrote it
    # (which has spent a trial on it already).
    measured = {r.config_index for r in prior
                if not _is_transient(r) or (job_id is not None and r.job_id == job_id)}
    with host_work:  # (a tuner may fit a transfer model on the history here)
        tune = factory(space, seed=seed, measured=measured, pool=pool,
                       task=TuningTask(workload, target, db), **dict(tuner_options or {}))
    start = sum(1 for r in prior if r.job_id == job_id) if job_id is not None else 0
    tally = _Tally(int(workload.flops()), start)
    stopped, callbacks = "budget", tuple(callbacks)
    try:  # the tuner may hold worker processes: closed however the loop ends
        with host_work:
            _replay_history(tune, tally, workload, target, space, prior, job_id)
        t0 = time.perf_counter()
        preferred = getattr(executor, "preferred_batch", lambda: 0)
        while tally.done < trials:
            n = min(max(batch_size, preferred()), trials - tally.done)
            with host_work:
                configs = tune.next_batch(n) if tune.has_next() else []
            if not configs:
                stopped = "exhausted"
                break
            inputs = [MeasureInput(workload, target, c) for c in configs]
            results = list(executor.submit(inputs))
            if len(results) != len(inputs):
                raise RuntimeError(f"executor returned {len(results)} results for "
                                   f"{len(inputs)} inputs")
            learnt = [(i, r) for i, r in zip(inputs, results) if not r.transient]
            if learnt:
                with host_work:
                    tune.update([i for i, _ in learnt], [r for _, r in learnt])
            batch = tally.done
            results = [_with_prediction(r, tune.predicted(c), batch)
                       for c, r in zip(configs, results)]
            if db is not None:
                db.add_trials(workload, target, job_id, list(zip(configs, results)), tally.flops)
            for cfg, res in zip(configs, results):
                tally.add(cfg, res)
            if learnt:  # the model was refit: its scores of the job's trials replace the last
                _store_model_scores(db, job_id, tune, tally, batch, host_work)
            _report(db, job_id, tally)
            progress = Progress(tally.done, trials, tally.gflops, tally.config,
                                sum(tally.errors.values()), tuple(zip(configs, results)), job_id,
                                time.perf_counter() - t0)
            if any([cb(progress) is False for cb in callbacks]):  # a list: every callback runs
                stopped = "callback"
                break
            if early_stopping is not None and tally.since_best >= early_stopping:
                stopped = "early_stopping"
                break
    finally:
        tune.close()
    retimed: tuple[Retimed, ...] = ()
    if stopped != "callback" and retime > 0:
        retimed = _retime(workload, target, executor, db, tally, retime)
        _report(db, job_id, tally)
    return TuneResult(tally.config, tally.cost, tally.gflops, tally.done - start,
                      tuple(tally.history), MappingProxyType(dict(tally.errors)), stopped, job_id,
                      retimed)


def _report(db: Optional[TrialStore], job_id: Optional[int], tally: _Tally) -> None:
    if db is not None and job_id is not None:
        db.update_job_progress(job_id, trials_done=tally.done, best_gflops=tally.gflops or None)


def _store_model_scores(db: Optional[TrialStore], job_id: Optional[int], tune: Tuner,
                        tally: _Tally, batch: int, host_work: ContextManager[Any]) -> None:
    """Score the job's valid trials (`_to_score`) with the tuner's current model and keep
    them on the job as {config_key: score} (the trials' ``config_key``: the config index in
    decimal), with ``batch`` (the job's trials before the batch the model was last fit
    after, as in ``extra["batch"]``) and ``trials`` (the job's trials by then).

    Nothing happens without a job, a store that keeps scores, or a model (random, ga,
    grid; xgb before its first fit). The scores are only a view of the model: a tuner
    failing to score is logged, not raised (a lost lease still is, as for every write).
    """
    store = getattr(db, "set_job_model_scores", None)
    if store is None or job_id is None or not tally.own:
        return
    configs = _to_score(tally.own, MODEL_SCORES_CAP)
    try:
        with host_work:
            scores = tune.model_scores(configs)
    except Exception:  # a view of the model must not stop the job
        log.warning("job %s: the tuner failed to score its trials", job_id, exc_info=True)
        return
    if scores is None:
        return
    # -inf (cannot score) and NaN have no JSON form; such a config is left out
    kept = {str(int(c.index)): float(v) for c, v in zip(configs, scores) if math.isfinite(v)}
    store(job_id, batch=batch, trials=tally.done, scores=kept)


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


def _is_transient(record: Any) -> bool:
    return str(record.error) == ErrorKind.TRANSIENT.value


def _config_of(space: "ConfigSpace", record: Any) -> Optional[Config]:
    """The record's config in this space, or None when the space has changed since."""
    try:
        return Config.from_json(record.config, space)
    except (ValueError, IndexError, TypeError):
        return None


def _replay_history(tune: Tuner, tally: _Tally, workload: Any, target: Any,
                    space: "ConfigSpace", prior: Sequence[Any], job_id: Optional[int]) -> None:
    """Tell the tuner what earlier runs measured, and start the tally from their best (and
    its list of the job's valid trials from the job's own records)."""
    inputs, results = [], []
    for record in prior:
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
            tally.valid.append((cfg, res.costs))
            if job_id is not None and record.job_id == job_id:
                tally.own.append((cfg, res.cost))
    if inputs:
        tune.update(inputs, results)


def _retime(workload: Any, target: Any, executor: Executor, db: Optional[TrialStore],
            tally: _Tally, k: int) -> tuple[Retimed, ...]:
    """Measure the top ``k`` valid configs again; rank them by the median of all their repeats.

    When every re-timed config comes out slower than the first timing of one that was not
    re-timed, the next ``k`` such configs are re-timed too (at most ``RETIME_ROUNDS``
    rounds), so the winner is a config timed twice. A re-run giving a wrong answer or
    crashing disqualifies the config (a timeout does not: the machine may have been busy).
    The re-run is not a trial: budget and history are unchanged. When the database has
    ``update_trial_costs``, the pooled repeats replace the record's costs, and a disqualified
    record is marked failed, so that ``best()`` agrees with this ranking; otherwise only the
    returned `TuneResult` reflects it.
    """
    # first timings, fastest first (a stable sort: ties keep measurement order)
    ranked = sorted(((statistics.median(first), cfg, first) for cfg, first in tally.valid),
                    key=lambda item: item[0])
    update = getattr(db, "update_trial_costs", None)
    pinned = getattr(executor, "pinned", None)
    with pinned() if pinned is not None else nullcontext(executor) as one_device:
        return _retime_rounds(workload, target, one_device, update, tally, ranked, k)


def _retime_rounds(workload: Any, target: Any, executor: Executor, update: Any, tally: _Tally,
                   ranked: list[tuple[float, Config, tuple[float, ...]]],
                   k: int) -> tuple[Retimed, ...]:
    out: list[Retimed] = []
    done: set[int] = set()
    tally.cost, tally.config = float("inf"), None
    for _ in range(RETIME_ROUNDS):
        batch = [item for item in ranked
                 if item[1].index not in done and item[0] < tally.cost][:k]
        if not batch:
            break
        results = executor.submit([MeasureInput(workload, target, cfg) for _, cfg, _ in batch])
        for (first_cost, cfg, first), res in zip(batch, results):
            done.add(cfg.index)
            pooled = tuple(first) + (tuple(res.costs) if res.ok else ())
            cost = statistics.median(pooled)
            out.append(Retimed(cfg.index, first_cost, res.cost if res.ok else None, cost,
                               res.error.value))
            if res.error not in _DISQUALIFY:
                tally.offer(cfg, cost)
            if update is None:
                continue
            if res.ok:
                extra = {"first_costs": list(first), "retimed_costs": list(res.costs)}
                if "measured_by" in res.extra:
                    extra["retimed_by"] = res.extra["measured_by"]
                update(workload, target, cfg.index, costs=pooled, extra=extra)
            elif res.error in _DISQUALIFY:  # never hand out a kernel that failed its re-run
                update(workload, target, cfg.index, costs=first, extra={},
                       error=res.error.value, error_msg=f"on re-timing: {res.error_msg}")
    return tuple(out)


def _with_prediction(result: MeasureResult, score: Optional[float], batch: int) -> MeasureResult:
    """Keep the model's score with the trial, and its batch (the job's trials before it): the
    model is refit between batches, so scores compare only within one (the dashboard's rank
    correlation per batch)."""
    if score is None:
        return result
    return dataclasses.replace(result, extra={**result.extra, "predicted": float(score),
                                              "batch": batch})
