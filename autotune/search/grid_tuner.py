"""Grid search: configs in index order, skipping measured ones (exhaustive for small spaces)."""
from __future__ import annotations

from typing import Any, Iterator

from autotune.search.base import Tuner
from autotune.space import Config


class GridTuner(Tuner):
    """Index order from 0 (or the replay pool's indices in increasing order)."""

    name = "grid"

    def __init__(self, space: Any, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        self._order: Iterator[int] = iter(sorted(self.pool)) if self.pool is not None \
            else iter(range(space.size))

    def _propose(self, n: int) -> Iterator[Config]:
        found = 0
        for index in self._order:
            if self._admissible(index):
                yield self.space.get(index)
                found += 1
                if found == n:
                    return
