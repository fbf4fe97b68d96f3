"""Genetic search: breed new configs from the fastest ones by crossover and mutation.

The population is the last ``pop_size`` measured configs plus the ``elite`` best ever, so it
works with any batch size and picks up where a resumed job left off. Parents are chosen by
throughput (tournament or roulette); children already measured are mutated again or dropped.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from autotune.search.base import Tuner
from autotune.search.options import Option
from autotune.space import Config

# Retries per child before giving up on a pair of parents (the base class then samples).
_CHILD_TRIES = 4


class GATuner(Tuner):
    """Genetic algorithm over knob positions (uniform crossover, per-knob mutation)."""

    name = "ga"
    # Maxima bound the population a batch sorts and breeds from (a real job never needs more).
    OPTIONS = (
        Option("pop_size", "configs in the breeding population; the first ones are random",
               32, minimum=2, maximum=4096),
        Option("elite", "best configs ever that always stay in the population", 4, minimum=0,
               maximum=1024),
        Option("selection", "how parents are picked by throughput", "tournament",
               choices=("tournament", "roulette")),
        Option("tournament_size", "contestants per tournament", 3, minimum=2, maximum=64),
        Option("crossover_rate", "probability that a child mixes two parents", 0.9,
               minimum=0.0, maximum=1.0),
        Option("mutation_rate", "probability that each knob of a child changes", 0.1,
               minimum=0.0, maximum=1.0),
    )

    def __init__(self, space: Any, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        self._configs: list[Config] = []  # measured, in order
        self._scores: list[float] = []

    def _observe(self, configs: Sequence[Config], scores: Sequence[float]) -> None:
        self._configs.extend(configs)
        self._scores.extend(scores)

    def _population(self) -> tuple[list[Config], np.ndarray]:
        opts = self.options
        order = np.argsort(-np.asarray(self._scores), kind="stable")
        chosen = [int(i) for i in order[: opts["elite"]]]
        elite = set(chosen)
        recent = [i for i in range(len(self._configs) - 1, -1, -1) if i not in elite]
        chosen += recent[: max(opts["pop_size"] - len(chosen), 0)]
        return [self._configs[i] for i in chosen], np.asarray([self._scores[i] for i in chosen])

    def _propose(self, n: int) -> list[Config]:
        if len(self._configs) < self.options["pop_size"]:
            return []  # first generation: the base class fills the batch at random
        pop, scores = self._population()
        if not scores.any():
            return []  # nothing valid yet: selection by throughput means nothing
        children: list[Config] = []
        taken: set[int] = set()
        for _ in range(3 * n):  # bounded: a converged population may breed only known configs
            if len(children) == n:
                break
            child = self._child(pop, scores, taken)
            if child is not None:
                children.append(child)
                taken.add(child.index)
        return children

    def _child(self, pop: list[Config], scores: np.ndarray, taken: set[int]) -> Config | None:
        opts, rng, space = self.options, self.rng, self.space
        a = pop[self._select(scores)]
        child = a
        if rng.random() < opts["crossover_rate"]:
            child = space.crossover(a, pop[self._select(scores)], rng)
        k = int(rng.binomial(len(space.dims), opts["mutation_rate"]))
        if k:
            child = space.mutate(child, rng, k)
        for _ in range(_CHILD_TRIES):
            if child.index not in taken and self._admissible(child.index):
                return child
            child = space.mutate(child, rng, 1)  # a known config: step away from it
        return None

    def _select(self, scores: np.ndarray) -> int:
        rng = self.rng
        if self.options["selection"] == "roulette":
            return int(rng.choice(len(scores), p=scores / scores.sum()))
        size = min(self.options["tournament_size"], len(scores))
        contestants = rng.choice(len(scores), size=size, replace=False)
        return int(contestants[np.argmax(scores[contestants])])
