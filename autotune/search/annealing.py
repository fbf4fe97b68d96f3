"""Parallel simulated annealing over a ConfigSpace, maximising a batch score function.

The optimizer that searches a cost model, kept apart from the model (as in AutoTVM's
``find_maximums``). Chains persist between ``run`` calls, so each round goes on from where
the last one stopped, under the newest model.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from autotune.space import Config, ConfigSpace

ScoreFn = Callable[[Sequence[Config]], np.ndarray]


class Annealer:
    """``n_chains`` chains; each step moves every chain to a random neighbour or one-knob
    mutation, accepted if better or with probability exp(delta / T), T falling linearly
    from ``temperature`` (in standard deviations of the chains' scores) to 0."""

    def __init__(self, space: ConfigSpace, rng: np.random.Generator, n_chains: int = 64,
                 steps: int = 50, temperature: float = 1.0) -> None:
        self.space, self.rng = space, rng
        self.n_chains, self.steps, self.temperature = n_chains, steps, temperature
        self.chains: list[Config] = []

    def seed(self, starts: Sequence[Config]) -> None:
        """Top the chains up to ``n_chains``: first from ``starts``, then at random."""
        have = {c.index for c in self.chains}
        for c in starts:
            if len(self.chains) >= self.n_chains:
                return
            if c.index not in have:
                self.chains.append(c)
                have.add(c.index)
        missing = self.n_chains - len(self.chains)
        if missing > 0:
            self.chains += self.space.sample(self.rng, missing, exclude=have)

    def run(self, score: ScoreFn, keep: int, admissible: Callable[[int], bool],
            afford: Callable[[Sequence[Config]], bool] | None = None
            ) -> list[tuple[float, Config]]:
        """The ``keep`` best admissible configs visited (score, config), best first.

        Scores of -inf mark invalid configs (never accepted). ``afford(proposals)`` may stop
        the walk before a step whose proposals would cost too much to score.
        """
        rng = self.rng
        cur = list(self.chains)
        cur_s = np.asarray(score(cur), dtype=np.float64)
        finite = cur_s[np.isfinite(cur_s)]
        scale = float(finite.std()) if finite.size > 1 and finite.std() > 0 else 1.0
        found: dict[int, tuple[float, Config]] = {}
        self._offer(found, cur, cur_s, admissible)
        for step in range(self.steps):
            nxt = [self.move(c) for c in cur]
            if afford is not None and not afford(nxt):
                break
            nxt_s = np.asarray(score(nxt), dtype=np.float64)
            self._offer(found, nxt, nxt_s, admissible)
            temp = self.temperature * (1.0 - step / self.steps) * scale
            with np.errstate(invalid="ignore", over="ignore"):
                delta = nxt_s - cur_s
                accept = delta >= 0
                if temp > 0:
                    accept |= rng.random(len(cur)) < np.exp(np.minimum(delta, 0.0) / temp)
            accept &= np.isfinite(nxt_s)
            cur = [b if a else c for a, b, c in zip(accept.tolist(), nxt, cur)]
            cur_s = np.where(accept, nxt_s, cur_s)
        self.chains = cur
        return sorted(found.values(), key=lambda t: (-t[0], t[1].index))[:keep]

    def move(self, c: Config) -> Config:
        """A random neighbour (one knob one step) or, half the time, a one-knob mutation."""
        if self.rng.random() < 0.5:
            nb = self.space.neighbors(c, self.rng, k=1)
            if nb:
                return nb[0]
        return self.space.mutate(c, self.rng, 1)

    @staticmethod
    def _offer(found: dict[int, tuple[float, Config]], configs: Sequence[Config],
               scores: np.ndarray, admissible: Callable[[int], bool]) -> None:
        for c, v in zip(configs, scores.tolist()):
            if v > -np.inf and c.index not in found and admissible(c.index):
                found[c.index] = (v, c)
