"""`tune_tasks` / `tune_model`: a model's tasks tuned under one budget, as a model run.

Trials already recorded for the tasks' workloads on the target count against the budget,
so running the same model again continues where the database left off. Each task's trials
of this call are a job linked to the run, held (`autotune.db.lease.held_job`) while its
`TuningSession` lives; the scheduler (`autotune.frontend.scheduler`) hands out the rounds,
and each round steps one task's session by one batch.
"""
from __future__ import annotations

import logging
import math
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence

from autotune.api import (
    SETTINGS_DB,
    DbArg,
    TargetArg,
    as_target,
    check_measurable,
    default_executor,
    open_database,
    tuner_options_of,
    tuning_session,
)
from autotune.db import Database
from autotune.db.lease import HeldJob, LeaseKeeper, held_job, new_owner
from autotune.frontend.progress import ModelProgress, ProgressPrinter, TaskProgress
from autotune.frontend.scheduler import TaskScheduler
from autotune.frontend.tasks import ModelTasks, Task
from autotune.job_options import JobOptions
from autotune.measure.result import MeasureUnavailable
from autotune.search import DEFAULT_BATCH_SIZE, DEFAULT_TUNER, Progress, TuneResult, TuningSession
from autotune.search.registry import tuner_options as options_table
from autotune.search.store import JobStopped
from autotune.settings import Settings
from autotune.target import Target

if TYPE_CHECKING:
    from autotune.measure import MeasureOptions
    from autotune.search.loop import Executor

log = logging.getLogger("autotune.frontend")

# One tuner per task stays alive for the whole run: the xgb tuner's lowering processes
# (one per further core) would multiply by the task count, so a model run lowers in-process.
MODEL_TUNER_OPTIONS: Mapping[str, Any] = {"workers": 0}


@dataclass(frozen=True)
class ModelTuneResult:
    """The outcome of a model run: spending, the latency estimate, and each task's state."""

    run_id: Optional[int]
    model: ModelTasks
    budget: int
    trials: int  # measured by this call
    trials_done: int  # counted against the budget (earlier records included)
    estimated_latency_s: Optional[float]
    tasks: tuple[TaskProgress, ...]
    failed: Mapping[str, str]  # task name -> why it stopped early


def tune_tasks(model: ModelTasks, *, trials: int, target: TargetArg = "llvm",
               db: DbArg = SETTINGS_DB, tuner: Optional[str] = None,
               batch_size: int = DEFAULT_BATCH_SIZE, seed: int = 0, transfer: bool = True,
               measure_options: Optional["MeasureOptions"] = None,
               executor: Optional["Executor"] = None,
               tuner_options: Optional[Mapping[str, Any]] = None,
               callbacks: Iterable[Callable[[ModelProgress], None]] = (),
               progress: Any = False) -> ModelTuneResult:
    """Tune ``model``'s tasks on ``target`` with ``trials`` in all; see the module docstring.

    ``progress``: True (stderr) or a stream to draw the run on. ``db=None`` keeps nothing
    (no run, no resumption). Other arguments as `autotune.tune`.
    """
    if trials < 0 or batch_size < 1:
        raise ValueError(f"tune_model: need trials >= 0 and batch_size >= 1; got {trials}, "
                         f"{batch_size}")
    tgt = as_target(target)
    for task in model.tasks:  # a dtype the target refuses: fail before any run or job
        task.workload.check_target(tgt)
    if executor is None:
        check_measurable(tgt)
    with open_database(db) as database:
        name = tuner or DEFAULT_TUNER
        known = {opt.name for opt in options_table(name)}
        opts = {k: v for k, v in MODEL_TUNER_OPTIONS.items() if k in known}
        run = _ModelRun(model, tgt, database, trials, name, batch_size, seed, transfer,
                        {**opts, **dict(tuner_options or {})})
        printer = ProgressPrinter(progress) if progress else None
        exe = executor if executor is not None else default_executor(tgt, measure_options)
        try:
            return run.run(exe, [*callbacks, *([printer] if printer else [])])
        finally:
            if executor is None:
                exe.close()
            if printer is not None:
                printer.finish()


def tune_model(model: Any, example_inputs: Any, *, trials: int = 1000,
               target: TargetArg = "llvm", db: DbArg = SETTINGS_DB,
               layout: Optional[str] = None,
               **kwargs: Any) -> ModelTuneResult:
    """Extract ``model``'s tasks at ``example_inputs`` for ``target`` (`autotune.extract`:
    on llvm, the prepacked forms `compile_model` runs, and under ``layout="auto"``, its
    default there, the blocked layouts it runs) and tune them with one budget of
    ``trials`` (`tune_tasks` takes the other arguments)."""
    from autotune.frontend.torch import extract

    tgt = as_target(target)
    return tune_tasks(extract(model, example_inputs, target=tgt, layout=layout),
                      trials=trials, target=tgt, db=db, **kwargs)


class _ModelRun:
    """One call's run: its database row, task jobs, scheduler and task loops."""

    def __init__(self, model: ModelTasks, target: Target, db: Optional[Database], budget: int,
                 tuner: str, batch_size: int, seed: int, transfer: bool,
                 tuner_options: Mapping[str, Any]) -> None:
        self.model, self.target, self.db, self.budget = model, target, db, budget
        self.tuner, self.seed, self.transfer = tuner, seed, transfer
        self.tuner_options = dict(tuner_options)
        self.owner = new_owner()
        tasks = model.tasks
        self.scheduler = TaskScheduler([t.weight for t in tasks],
                                       [t.workload.flops() for t in tasks],
                                       [t.workload.op for t in tasks], seed=seed)
        self.prior = self._prior()
        self.spent = sum(self.prior)
        remaining = max(budget - self.spent, 0)
        # Small budgets: a smaller batch, so that every task gets its warm-up round.
        self.batch = max(1, min(batch_size, remaining // max(len(tasks), 1)))
        for i, (n, best) in enumerate(zip(self.prior, self._prior_best)):
            if n:
                self.scheduler.resume(i, n / self.batch, best)
        self.jobs: dict[int, int] = {}
        self.loops: dict[int, _TaskLoop] = {}
        self.failed: dict[str, str] = {}
        self.run_id: Optional[int] = None
        self.keeper: Optional[LeaseKeeper] = None

    def _prior(self) -> list[int]:
        if self.db is None:
            self._prior_best: list[Optional[float]] = [None] * len(self.model.tasks)
            return [0] * len(self.model.tasks)
        found = self.db.task_trials([t.workload.key for t in self.model.tasks],
                                 self.target.key)
        self._prior_best = [found[t.workload.key].best_cost for t in self.model.tasks]
        return [found[t.workload.key].trials for t in self.model.tasks]

    # --- the run -----------------------------------------------------------------------------
    def run(self, executor: "Executor", callbacks: Sequence[Callable[[ModelProgress], None]]
            ) -> ModelTuneResult:
        self._open_run()
        self.t0 = time.monotonic()
        state, error = "done", None
        self._report(callbacks, None, 0, "start")
        try:
            rounds = 0
            while self.budget - self.spent >= self.batch:
                i = self.scheduler.next_task()
                if i is None:
                    break
                self._round(i, executor)
                rounds += 1
                self._report(callbacks, i, rounds)
            self._close_loops()
            self._retime(executor, lambda i: self._report(callbacks, i, rounds, "retime"))
            self._report(callbacks, None, rounds, "end")
        except BaseException as exc:
            state = "cancelled" if isinstance(exc, KeyboardInterrupt) else "failed"
            error = None if state == "cancelled" else f"{type(exc).__name__}: {exc}"
            self._close_loops()
            raise
        finally:
            self._end(state, error)
        return self._result()

    def _open_run(self) -> None:
        if self.db is None:
            return
        found = self.db.latest_run(self.model.fingerprint, self.target.key)
        if found is not None:
            self.run_id = self.db.take_run(found.id, owner=self.owner, budget=self.budget).id
        else:
            self.run_id = self.db.create_run(
                name=self.model.name, fingerprint=self.model.fingerprint, target=self.target,
                budget=self.budget, tasks=[t.to_dict() for t in self.model.tasks],
                unsupported=[u.to_dict() for u in self.model.unsupported], owner=self.owner).id

        self.keeper = LeaseKeeper(self.db, self.owner, Settings().job_lease_s).start()
        self.db.update_run(self.run_id, trials_done=self.spent,
                        estimated_latency_s=self.scheduler.estimated_latency(), elapsed_s=0.0)

    def _round(self, i: int, executor: "Executor") -> None:
        """One batch of task ``i``; a task whose session ended is retired."""
        loop = self.loops.get(i) or self._start(i, executor)
        before = loop.session.trials_done
        try:
            inputs = loop.session.next_batch(executor.preferred_batch())
            if inputs:
                loop.progress = loop.session.record(executor.submit(inputs))
                if loop.held is not None and loop.held.stopping():
                    loop.session.stop("callback")  # cancelled, or its lease was lost
                self.spent += loop.session.trials_done - before
                self.scheduler.observe(i, self._best_cost(i, loop.progress))
                if loop.session.stopped is None:
                    return
        except (MeasureUnavailable, KeyboardInterrupt):
            raise
        except JobStopped:  # its job was cancelled: the task ends, nothing more written
            loop.session.stop("callback")
        except Exception as exc:
            self._fail(i, exc)
            return
        self.scheduler.retire(i)  # its space is exhausted, its budget spent, or it must stop
        self._finish(i, executor)

    def _start(self, i: int, executor: "Executor") -> "_TaskLoop":
        task = self.model.tasks[i]
        job_id = self._job(task)
        held = None
        stack = ExitStack()
        if job_id is not None and self.keeper is not None:
            self.jobs[i] = job_id
            held = stack.enter_context(held_job(self.keeper, job_id))
        try:
            session = tuning_session(
                task.workload, self.target, executor, trials=self.budget - self.spent,
                tuner=self.tuner, tuner_options=tuner_options_of(self.tuner,
                                                                 self.tuner_options,
                                                                 self.transfer),
                seed=self.seed + i, db=held.store if held is not None else self.db,
                batch_size=self.batch, job_id=job_id)
        except BaseException:
            stack.close()
            raise
        self.loops[i] = _TaskLoop(session, held, stack)
        return self.loops[i]

    def _job(self, task: Task) -> Optional[int]:
        if self.db is None or self.run_id is None or self.keeper is None:
            return None
        return self.db.create_task_job(
            self.run_id, workload=task.workload, target=self.target, tuner=self.tuner,
            trials=self.budget - self.spent, options=JobOptions(
                tuner=self.tuner, trials=self.budget - self.spent, batch_size=self.batch,
                seed=self.seed, transfer=self.transfer, tuner_options=self.tuner_options,
                model_run=self.run_id, weight=task.weight).to_json(),
            owner=self.owner, lease_s=self.keeper.lease_s)

    def _best_cost(self, i: int, progress: Any) -> Optional[float]:
        if progress is None or not progress.best_gflops:
            return None
        return self.model.tasks[i].workload.flops() / (progress.best_gflops * 1e9)

    def _fail(self, i: int, exc: BaseException) -> None:
        """Task ``i`` failed: retired, its job released as failed, the run goes on."""
        self.scheduler.retire(i)
        name = self.model.tasks[i].name
        self.failed[name] = f"{type(exc).__name__}: {exc}"
        log.warning("tune_model: task %s failed: %s", name, self.failed[name])
        loop = self.loops.get(i)
        if loop is not None:
            loop.error = exc
            loop.end("failed", self.failed[name])

    def _finish(self, i: int, executor: "Executor") -> None:
        """Re-time task ``i``'s top configs (its session's final window) and end its job; the
        scheduler's best follows the re-timed figure."""
        loop = self.loops[i]
        if loop.result is not None or loop.error is not None:
            return
        try:
            loop.result = loop.session.finish(executor)
        except (MeasureUnavailable, KeyboardInterrupt):
            raise
        except Exception as exc:
            self._fail(i, exc)
            return
        if loop.result.ok:
            self.scheduler.tasks[i].best = loop.result.best_cost
        loop.end("done")

    def _close_loops(self) -> None:
        for loop in self.loops.values():
            loop.session.close()

    def _retime(self, executor: "Executor", announce: Callable[[int], None]) -> None:
        """Finish every task the scheduler left running (re-timing its top configs, each
        ``announce``d first); the bests follow."""
        for i in sorted(self.loops):
            loop = self.loops[i]
            if loop.result is None and loop.error is None:
                announce(i)
            self._finish(i, executor)

    def _report(self, callbacks: Sequence[Callable[[ModelProgress], None]], task: Optional[int],
                rounds: int, phase: str = "round") -> None:
        latency = self.scheduler.estimated_latency()
        elapsed = time.monotonic() - self.t0
        if self.db is not None and self.run_id is not None:
            self.db.update_run(self.run_id, trials_done=self.spent,
                            estimated_latency_s=latency, elapsed_s=elapsed)
        snapshot = ModelProgress(self.run_id, rounds, task, self.spent, self.budget, latency,
                                 self._task_progress(), elapsed, phase)
        for cb in callbacks:
            cb(snapshot)

    def _task_progress(self) -> tuple[TaskProgress, ...]:
        out = []
        for i, task in enumerate(self.model.tasks):
            loop = self.loops.get(i)
            done = loop.progress.trials_done if loop and loop.progress else 0
            best = self.scheduler.tasks[i].best
            out.append(TaskProgress(i, task.name, task.weight, self.prior[i] + done,
                                    best if math.isfinite(best) else None, self.jobs.get(i)))
        return tuple(out)

    def _end(self, state: str, error: Optional[str]) -> None:
        for loop in self.loops.values():  # jobs still held end with the run
            loop.end(state, None if state == "done" else error)
        if self.db is None or self.run_id is None:
            return
        if self.keeper is not None:
            self.keeper.stop()
        self.db.finish_run(self.run_id, state=state, error=error)

    def _result(self) -> ModelTuneResult:
        tasks = self._task_progress()
        return ModelTuneResult(self.run_id, self.model, self.budget,
                               self.spent - sum(self.prior), self.spent,
                               self.scheduler.estimated_latency(), tasks, dict(self.failed))


class _TaskLoop:
    """One task of a model run: its session, stepped a batch per round, and the hold of its
    job (released, in the state `end` names, when the task ends or the run does)."""

    def __init__(self, session: TuningSession, held: Optional[HeldJob],
                 stack: ExitStack) -> None:
        self.session, self.held, self._stack = session, held, stack
        self.progress: Optional[Progress] = None
        self.result: Optional[TuneResult] = None
        self.error: Optional[BaseException] = None

    def end(self, state: str, error: Optional[str] = None) -> None:
        """Close the session and release the job as ``state`` (once)."""
        self.session.close()
        if self.held is not None:
            self.held.end(state, error)
        self._stack.close()
