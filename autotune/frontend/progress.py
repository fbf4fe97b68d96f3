"""What a model run reports after each round, and a printer of it for terminals and logs."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import IO, Any, Optional


@dataclass(frozen=True)
class TaskProgress:
    """One task's standing: trials spent on it (earlier runs' included) and best cost (s)."""

    index: int
    name: str
    weight: int
    trials: int
    best_cost: Optional[float]
    job_id: Optional[int]


# What a report is about: the run's start (what earlier runs spent of the budget), a round
# given to ``task``, the final re-timing of ``task`` (before it runs), the run's end.
PHASES = ("start", "round", "retime", "end")


@dataclass(frozen=True)
class ModelProgress:
    """After round ``round`` (given to ``task``; None: the final report after re-timing),
    or at another ``phase`` of the run (`PHASES`)."""

    run_id: Optional[int]
    round: int
    task: Optional[int]
    trials_done: int
    budget: int
    estimated_latency_s: Optional[float]
    tasks: tuple[TaskProgress, ...]
    elapsed_s: float
    phase: str = "round"


def ms(seconds: Optional[float]) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:.3f} ms"


class ProgressPrinter:
    """A model-run callback: one line per round, and the per-task table at the end."""

    def __init__(self, stream: Any = True) -> None:
        self.stream: IO[str] = sys.stderr if stream is True else stream

    def __call__(self, p: ModelProgress) -> None:
        if p.phase == "start":
            self.stream.write(started(p) + "\n")
        elif p.phase == "retime" and p.task is not None:
            t = p.tasks[p.task]
            self.stream.write(f"[{p.trials_done}/{p.budget}] re-timing task {t.index} "
                              f"{t.name}: its best configs timed side by side\n")
        elif p.task is None:
            self.table(p)
        else:
            self.round(p, p.tasks[p.task])
        self.stream.flush()

    def round(self, p: ModelProgress, t: TaskProgress) -> None:
        """One line: the round's task and the model's estimate."""
        self.stream.write(f"[{p.trials_done}/{p.budget}] model est {ms(p.estimated_latency_s)}"
                          f"  <- task {t.index} x{t.weight} {t.name}: {t.trials} trials, best "
                          f"{ms(t.best_cost)}\n")

    def table(self, p: ModelProgress) -> None:
        """Each task's weight, trials and best, and its share of the estimated latency."""
        total = p.estimated_latency_s
        self.stream.write(f"model run {p.run_id}: {p.trials_done}/{p.budget} trials in "
                          f"{p.elapsed_s:.0f} s, estimated latency {ms(total)}\n")
        for t in p.tasks:
            share = "" if total is None or t.best_cost is None else \
                f"{100 * t.weight * t.best_cost / total:5.1f}%"
            self.stream.write(f"  {t.index:3d} x{t.weight:<3d} {t.trials:5d} trials "
                              f"{ms(t.best_cost):>12} {share:>6}  {t.name}\n")
        self.stream.flush()

    def finish(self) -> None:
        self.stream.flush()


def started(p: ModelProgress) -> str:
    """The run's start in words: the budget, and the trials of earlier runs (of these
    workloads on this target) that count against it, task by task."""
    earlier = [t for t in p.tasks if t.trials]
    if not earlier:
        return f"model run {p.run_id}: a budget of {p.budget} trials for {len(p.tasks)} tasks"
    left = max(p.budget - p.trials_done, 0)
    each = ", ".join(f"task {t.index} {t.name}: {t.trials}" for t in earlier)
    return (f"model run {p.run_id}: {p.trials_done} of its {p.budget} trials are already in "
            f"the database and count against the budget ({each}); {left} remain")
