"""Transfer learning: a base model from other workloads' records, blended into the job's own.

The base model sees only the curve features (``kind="curve"``), which do not depend on the
number or order of loops, so it carries over between workloads of one operator. Scores of
the two models are blended on ranks; the base model's weight decays as the job's own
records accumulate.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import numpy as np

from autotune.costmodel.cache import FeatureCache, LowerFn, default_lower, features_for
from autotune.costmodel.features import CURVE_SLICE, N_AST
from autotune.costmodel.model import XGBModel, rankdata
from autotune.costmodel.workers import FeatureWorkers
from autotune.driver import config_space
from autotune.ops import Workload
from autotune.space import Config
from autotune.target import Target

log = logging.getLogger(__name__)

# The base model's weight halves after this many of the job's own records.
DEFAULT_HALF_LIFE = 64


class BaseModel:
    """An `XGBModel` on curve features of other workloads; ``predict`` takes "ast" rows."""

    def __init__(self, model: XGBModel, workloads: Sequence[str], n_records: int) -> None:
        self.model = model
        self.workloads = tuple(workloads)
        self.n_records = n_records

    @classmethod
    def from_history(cls, history: Mapping[str, Sequence[Any]], target: Any, *,
                     exclude: str | None = None, max_records: int = 3000,
                     max_per_workload: int = 300, lower: LowerFn = default_lower,
                     workers: FeatureWorkers | None = None, seed: int = 0,
                     keep: Callable[[Any, Any], bool] | None = None,
                     **model_options: Any) -> BaseModel | None:
        """Train on ``history`` (workload key -> TrialRecords, as ``Database.history``
        returns), skipping workload ``exclude``; None when nothing usable is left.

        Each (workload, target) group is a ranking group, its configs read in the space the
        workload has on that target (``target`` when the record's cannot be made here);
        ``keep(workload, target)`` may refuse a group (another kernel family's). At
        most ``max_per_workload`` records per group and about ``max_records`` in all are
        used (a random sample): each costs a lowering, about half a millisecond (shared
        with ``workers`` when given).
        """
        rng = np.random.default_rng(seed)
        groups = _groups(history, target, exclude, keep)
        cap = max(8, min(max_per_workload, max_records // max(1, len(groups))))
        xs, ys, gs, used = [], [], [], []
        for key, wl, tgt, recs in groups:
            configs, labels = _configs_and_labels(wl, tgt, recs)
            if not configs or max(labels) <= 0:
                continue  # no valid record: it cannot say what is fast
            if len(configs) > cap:
                pick = np.sort(rng.choice(len(configs), cap, replace=False))
                configs = [configs[i] for i in pick]
                labels = [labels[i] for i in pick]
            X = features_for(wl, tgt, configs, "curve", FeatureCache(len(configs)), lower,
                             workers)
            xs.append(X)
            ys.append(np.asarray(labels))
            gs.append(np.full(len(X), len(xs)))
            used.append(key)
        if not used:
            return None
        model = XGBModel("rank", seed=seed, **model_options)
        model.fit(np.concatenate(xs), np.concatenate(ys), np.concatenate(gs))
        n = sum(len(x) for x in xs)
        log.info("transfer base model: %d records of %d workloads", n, len(set(used)))
        return cls(model, sorted(set(used)), n)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Scores of "ast" rows (their curve block is used) or of curve rows."""
        X = np.asarray(X)
        if X.shape[1] == N_AST:
            X = X[:, CURVE_SLICE]
        return self.model.predict(X)


def _groups(history: Mapping[str, Sequence[Any]], target: Any, exclude: str | None,
            keep: Callable[[Any, Any], bool] | None) -> list[tuple[str, Any, Any, list[Any]]]:
    """(workload key, workload, target, records) of each ranking group of ``history``
    that `BaseModel.from_history` learns from."""
    groups = []
    for key, records in sorted(history.items()):
        if key == exclude:
            continue
        try:
            wl = Workload.from_json(key)
        except ValueError:
            continue
        by_target: dict[str, list[Any]] = {}
        for r in records:
            by_target.setdefault(str(getattr(r, "target_key", "")), []).append(r)
        for tkey, recs in sorted(by_target.items()):
            tgt = _target(tkey, target)
            if keep is None or keep(wl, tgt):
                groups.append((key, wl, tgt, recs))
    return groups


def _target(key: str, fallback: Any) -> Any:
    """The target named by a record's key, or ``fallback`` when it cannot be made here."""
    if not key or key == getattr(fallback, "key", None):
        return fallback
    try:
        return Target(key)
    except (ValueError, RuntimeError):
        return fallback


def _configs_and_labels(wl: Any, target: Any, records: Sequence[Any]) -> tuple[list, list]:
    """Configs of ``records`` in ``wl``'s space (records of another space version dropped)
    and their GFLOP/s (0 for a failure)."""
    sp = config_space(wl, target)
    configs, labels, seen = [], [], set()
    for r in records:
        try:
            cfg = Config.from_json(r.config, sp)
        except (ValueError, IndexError, TypeError, KeyError):
            continue
        if cfg.index in seen:
            continue
        seen.add(cfg.index)
        configs.append(cfg)
        labels.append(float(r.gflops) if r.gflops else 0.0)
    return configs, labels


def base_weight(n_own: int, half_life: float = DEFAULT_HALF_LIFE) -> float:
    """Weight of the base model after ``n_own`` own records: 1 at 0, 1/2 at ``half_life``."""
    return 1.0 / (1.0 + n_own / half_life) if half_life > 0 else 0.0


def blend(base_scores: np.ndarray, own_scores: np.ndarray | None, n_own: int,
          half_life: float = DEFAULT_HALF_LIFE) -> np.ndarray:
    """Rank-normalised ``w * base + (1 - w) * own`` with ``w = base_weight(n_own)``."""
    n = len(base_scores)
    b = rankdata(base_scores) / max(n, 1)
    if own_scores is None:
        return b
    w = base_weight(n_own, half_life)
    return w * b + (1.0 - w) * rankdata(own_scores) / max(n, 1)

