"""Random search: uniform sampling without replacement (the baseline every tuner must beat)."""
from __future__ import annotations

from typing import Iterable

from autotune.search.base import Tuner
from autotune.space import Config


class RandomTuner(Tuner):
    """Uniformly random configs, each at most once."""

    name = "random"

    def _propose(self, n: int) -> Iterable[Config]:
        return self._random(n)
