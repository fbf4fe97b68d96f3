"""Helpers shared by the search tests (a module of its own: several test folders have a
conftest, so ``from conftest import`` depends on collection order)."""
from __future__ import annotations

import dataclasses
from typing import Sequence

from autotune.measure.result import MeasureInput, MeasureResult
from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective
from autotune.space import Choice, ConfigSpace


def make_space(knobs: int = 5, size: int = 8) -> ConfigSpace:
    """A product of `knobs` integer knobs with `size` candidates each."""
    return ConfigSpace([Choice(f"k{i}", list(range(size))) for i in range(knobs)], name="fake")


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
