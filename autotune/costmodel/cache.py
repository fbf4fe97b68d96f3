"""Feature rows for configs of one workload on one target, cached by config index.

``features_for`` is the batch entry point the tuner and the models use. Lowering dominates
the cost of a new row (see benchmarks/features.py), so rows are kept in an LRU cache; an
invalid config (it fails to lower) gets an all-NaN row, which is cached too.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

import numpy as np

from autotune.costmodel.features import CURVE_SLICE, N_AST, knob_features
from autotune.costmodel.workers import CHUNK, FeatureWorkers, lowered_rows
from autotune.driver import (
    InvalidConfig,
    config_space,
    lower,
)
from autotune.ir.stmt import PrimFunc
from autotune.lru import LRU
from autotune.schedule.lower import LoweringError
from autotune.space import Config

KINDS = ("ast", "curve", "knob")
# ~5 KB per row: 16k rows is ~85 MB, about the distinct candidates of a long tuning job
DEFAULT_CACHE_SIZE = 16384

LowerFn = Callable[[Any, Any, Config], PrimFunc]


class FeatureCache:
    """LRU map from config index to its full "ast" row, for one (workload, target) pair.

    ``stats`` counts hits and misses and the seconds spent lowering and extracting.
    """

    def __init__(self, maxsize: int = DEFAULT_CACHE_SIZE) -> None:
        self.maxsize = maxsize
        self.owner: tuple[str, str] | None = None
        self._rows: LRU[int, np.ndarray] = LRU(maxsize)
        self.stats = {"hits": 0, "misses": 0, "lower_s": 0.0, "extract_s": 0.0}

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, index: int) -> bool:
        return index in self._rows

    def get(self, index: int) -> np.ndarray | None:
        """The cached row of ``index`` (marked recently used), or None."""
        return self._rows.get(index)

    def put(self, index: int, row: np.ndarray) -> None:
        self._rows.put(index, row)

    def bind(self, workload: Any, target: Any) -> None:
        """Tie the cache to one workload and target: indices mean nothing across spaces."""
        key = (str(getattr(workload, "key", workload)), str(getattr(target, "key", target)))
        if self.owner is None:
            self.owner = key
        elif self.owner != key:
            raise ValueError(f"FeatureCache holds rows of {self.owner}, not of {key}")


def default_lower(workload: Any, target: Any, config: Config) -> PrimFunc:
    return lower(workload, target, config)


def ast_rows(workload: Any, target: Any, configs: Sequence[Config], cache: FeatureCache,
             lower: LowerFn = default_lower, workers: FeatureWorkers | None = None
             ) -> np.ndarray:
    """Full "ast" rows of ``configs`` (NaN rows for configs that fail to lower).

    ``workers`` share the new rows of a large batch (only with the default ``lower``: theirs
    is ``driver.lower``).
    """
    cache.bind(workload, target)
    out: np.ndarray = np.empty((len(configs), N_AST), dtype=np.float32)
    misses: list[int] = []
    for i, cfg in enumerate(configs):
        row = cache.get(cfg.index)
        if row is None:
            misses.append(i)
        else:
            out[i] = row
    by_index = {configs[i].index: configs[i] for i in misses}

    def lower_one(index: int) -> PrimFunc | None:
        try:
            return lower(workload, target, by_index[index])
        except (InvalidConfig, LoweringError):
            return None

    local = partial(lowered_rows, lower_one=lower_one, stats=cache.stats)
    indices = [configs[i].index for i in misses]
    if workers is not None and lower is default_lower:
        out[misses] = workers.rows(workload, target, indices, local)
    else:  # in chunks: ``finish`` is cheapest on blocks that stay in the CPU's caches
        for s in range(0, len(indices), CHUNK):
            out[misses[s:s + CHUNK]] = local(indices[s:s + CHUNK])
    cache.stats["hits"] += len(configs) - len(misses)
    cache.stats["misses"] += len(misses)
    for i in misses:  # in input order, so the LRU keeps the latest configs
        cache.put(configs[i].index, out[i].copy())
    return out


def features_for(workload: Any, target: Any, configs: Iterable[Config], kind: str = "ast",
                 cache: FeatureCache | None = None, lower: LowerFn = default_lower,
                 workers: FeatureWorkers | None = None) -> np.ndarray:
    """Feature matrix of ``configs``: kind "ast" (``N_AST`` columns), "curve" (its
    structure-independent block) or "knob" (``knob_features``; no lowering, no cache).

    Pass the same ``cache`` across calls for one workload and target to reuse rows, and
    ``workers`` to compute a large batch of new rows on several cores.
    """
    if kind not in KINDS:
        raise ValueError(f"features_for: kind must be one of {KINDS}, got {kind!r}")
    configs = list(configs)
    if kind == "knob":
        return knob_features(config_space(workload, target), configs)
    if cache is None:  # (an empty cache is falsy: test for None)
        cache = FeatureCache(max(1, len(configs)))
    rows = ast_rows(workload, target, configs, cache, lower, workers)
    return rows if kind == "ast" else np.ascontiguousarray(rows[:, CURVE_SLICE])


def invalid_rows(X: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows of configs that failed to lower (all NaN)."""
    return np.isnan(X).all(axis=1) if X.size else np.zeros(len(X), dtype=bool)
