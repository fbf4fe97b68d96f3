"""The task scheduler of a model run: which task gets the next round of trials.

As Ansor's: each round goes to the task whose improvement would cut the model's estimated
latency (sum over tasks of weight x best cost) the most. A task's expected gain per round
mixes its recent slope (the best cost's fall over the last ``window`` rounds) with an
optimistic forward guess: that a round takes 1/t of its cost off after t rounds, or that it
could reach ``beta`` x the throughput of the fastest similar task (same operator). First
every task gets one round (warm-up, in order); then, with probability ``epsilon``, a random
live task instead (exploration).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

ALPHA = 0.2  # weight of the backward (observed) slope against the forward guess
BETA = 2.0
WINDOW = 3
EPSILON = 0.05
# Rounds a task may spend without a single valid config before it is given up.
MAX_ROUNDS_WITHOUT_VALID = 3


@dataclass
class _State:
    weight: int
    flops: int
    group: str
    rounds: float = 0.0  # rounds spent (resumed trials count as trials / batch size)
    best: float = float("inf")  # best cost in seconds
    curve: list[float] = field(default_factory=list)  # best cost after each round
    retired: bool = False


class TaskScheduler:
    """Chooses tasks round by round from what each round achieved."""

    def __init__(self, weights: Sequence[int], flops: Sequence[int], groups: Sequence[str], *,
                 alpha: float = ALPHA, beta: float = BETA, window: int = WINDOW,
                 epsilon: float = EPSILON, seed: int = 0) -> None:
        if not len(weights) == len(flops) == len(groups):
            raise ValueError("weights, flops and groups must have one entry per task")
        self.tasks = [_State(int(w), int(f), g) for w, f, g in zip(weights, flops, groups)]
        self.alpha, self.beta, self.window, self.epsilon = alpha, beta, window, epsilon
        self.rng = np.random.default_rng(seed)

    def resume(self, i: int, rounds: float, best: Optional[float]) -> None:
        """Start task ``i`` from earlier runs' records (no slope is known yet)."""
        task = self.tasks[i]
        task.rounds = rounds
        task.best = float("inf") if best is None else best
        if best is not None:
            task.curve.append(best)

    def observe(self, i: int, best: Optional[float]) -> None:
        """Task ``i`` had a round; ``best`` is its best cost since (None: none valid yet)."""
        task = self.tasks[i]
        task.rounds += 1
        if best is not None:
            task.best = min(task.best, best)
        if np.isfinite(task.best):
            task.curve.append(task.best)
        elif task.rounds >= MAX_ROUNDS_WITHOUT_VALID:
            task.retired = True

    def retire(self, i: int) -> None:
        """Task ``i`` gets no more rounds (its space is exhausted, or it failed)."""
        self.tasks[i].retired = True

    def live(self) -> list[int]:
        return [i for i, t in enumerate(self.tasks) if not t.retired]

    def next_task(self) -> Optional[int]:
        """The task for the next round; None when every task is retired."""
        live = self.live()
        if not live:
            return None
        for i in live:  # warm-up: one round each, in order
            if self.tasks[i].rounds == 0:
                return i
        if self.rng.random() < self.epsilon:
            return int(live[int(self.rng.integers(len(live)))])
        grads = [self.gradient(i) for i in live]
        if max(grads) == min(grads):
            return int(live[int(self.rng.integers(len(live)))])
        return int(live[int(np.argmin(grads))])

    def gradient(self, i: int) -> float:
        """d(estimated latency) / d(rounds of task i): negative, and the most negative wins."""
        task = self.tasks[i]
        if not np.isfinite(task.best):
            return -float("inf")  # nothing valid yet: its latency is unknown, look first
        cost, curve = task.best, task.curve
        backward = (curve[-1] - curve[-1 - self.window]) / self.window \
            if len(curve) > self.window else 0.0
        guess = cost - cost / max(task.rounds, 1.0)
        similar = [t for t in self.tasks if t.group == task.group and np.isfinite(t.best)]
        if len(similar) > 1:
            fastest = max(t.flops / t.best for t in similar)
            guess = min(guess, self.beta * task.flops / fastest)
        forward = guess - cost
        return task.weight * (self.alpha * backward + (1 - self.alpha) * forward)

    def estimated_latency(self) -> Optional[float]:
        """Sum of weight x best cost over the tasks (s); None while a task has no valid cost."""
        if any(not np.isfinite(t.best) for t in self.tasks):
            return None
        return float(sum(t.weight * t.best for t in self.tasks))
