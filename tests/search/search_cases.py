"""Helpers shared by the search tests (a module of its own: several test folders have a
conftest, so ``from conftest import`` depends on collection order)."""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from autotune.measure.result import MeasureInput, MeasureResult
from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective
from autotune.space import Choice, ConfigSpace


def make_space(knobs: int = 5, size: int = 8,
               default: Optional[Sequence[int]] = None) -> ConfigSpace:
    """A product of `knobs` integer knobs with `size` candidates each (``default``: the
    default's values, else the first config)."""
    values = None if default is None else {f"k{i}": int(v) for i, v in enumerate(default)}
    return ConfigSpace([Choice(f"k{i}", list(range(size))) for i in range(knobs)],
                       default=values, name="fake")


class SlowDefaultFirst(SyntheticExecutor):
    """A synthetic executor whose first measurement of the space's default config runs
    ``factor`` times slow (a busy moment of the host); later ones run as they should."""

    def __init__(self, objective: SyntheticObjective, factor: float = 50.0) -> None:
        super().__init__(objective)
        self.factor, self.default = factor, objective.space.default().index
        self.default_seen = 0

    def submit(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        results = super().submit(inputs)
        for i, inp in enumerate(inputs):
            if inp.config.index == self.default:
                self.default_seen += 1
                if self.default_seen == 1:
                    results[i] = dataclasses.replace(
                        results[i], costs=tuple(self.factor * c for c in results[i].costs))
        return results


class SlowRetiming(SyntheticExecutor):
    """A synthetic executor that turns ``factor`` times slower for its first ``slow``
    batches after ``after`` measured configs (the search's budget): the final re-timing
    runs in a slow moment of the machine, as in issue 29. Deterministic."""

    def __init__(self, objective: SyntheticObjective, *, after: int, slow: int,
                 factor: float = 2.0) -> None:
        super().__init__(objective)
        self.after, self.slow, self.factor = after, slow, factor
        self.late_batches: list[list[int]] = []  # config indices of each batch after `after`

    def submit(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        late = len(self.submitted) >= self.after
        results = super().submit(inputs)
        if not late:
            return results
        self.late_batches.append([i.config.index for i in inputs])
        if len(self.late_batches) > self.slow:
            return results
        return [dataclasses.replace(r, costs=tuple(self.factor * c for c in r.costs))
                if r.ok else r for r in results]
