"""A small ensemble of stochastic XGBoost models: its spread is the model's uncertainty.

Each member boosts on a random ``subsample`` of the rows per tree, with its own seed
(stochastic gradient boosting), so with few records the members disagree where the data
says little. ``predict`` is their mean; ``predict_each`` gives every member's scores, which
the xgb tuner uses to fill a batch Thompson-style (each slot takes one member's best pick).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from autotune.costmodel.model import XGBModel

MemberFactory = Callable[[int, float], XGBModel]  # (seed, subsample) -> an unfitted model


class Ensemble:
    """``size`` models from ``make(seed, subsample)``; one model when ``size`` is 1."""

    def __init__(self, make: MemberFactory, size: int = 4, subsample: float = 0.7,
                 seed: int = 0) -> None:
        if size < 1:
            raise ValueError(f"Ensemble: size must be >= 1, got {size}")
        if not 0.0 < subsample <= 1.0:
            raise ValueError(f"Ensemble: subsample must be in (0, 1], got {subsample}")
        seeds = np.random.default_rng(seed).integers(2**31, size=size)
        self.members = [make(int(s), subsample) for s in seeds]

    @property
    def fitted(self) -> bool:
        return all(m.fitted for m in self.members)

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None
            ) -> Ensemble:
        # XGBoost trains without the GIL: single-threaded members train side by side
        with ThreadPoolExecutor(min(len(self.members), os.cpu_count() or 1)) as pool:
            list(pool.map(lambda m: m.fit(X, y, groups), self.members))
        return self

    def predict_each(self, X: np.ndarray) -> np.ndarray:
        """Scores of rows ``X`` by every member, shape (size, len(X))."""
        return np.stack([m.predict(X) for m in self.members])

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The members' mean score of rows ``X`` (higher is faster)."""
        return self.predict_each(X).mean(axis=0)
