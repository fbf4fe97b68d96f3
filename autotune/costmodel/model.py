"""The learned cost model: gradient-boosted trees over feature rows, and its quality metrics.

Labels are throughputs normalised per workload (each group's best = 1, failures = 0), so
records of several workloads train one model. The default ranking objective only has to
order candidates within a workload, which is all the search needs.
"""
from __future__ import annotations

from typing import Any

import numpy as np

OBJECTIVES = {"rank": "rank:pairwise", "reg": "reg:squarederror"}


def normalize_labels(y: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
    """Throughputs divided by their group's maximum (0 where the maximum is not positive)."""
    y = np.nan_to_num(np.asarray(y, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    y = np.maximum(y, 0.0)
    g = np.zeros(len(y), dtype=np.int64) if groups is None else np.asarray(groups)
    out = np.zeros_like(y)
    for key in np.unique(g):
        sel = g == key
        top = y[sel].max(initial=0.0)
        if top > 0:
            out[sel] = y[sel] / top
    return out


class XGBModel:
    """XGBoost on feature rows: ``fit(X, y, groups)`` then ``predict(X)`` (higher = faster).

    ``objective``: "rank" (pairwise ranking within each group) or "reg" (squared error on
    the normalised throughput). Small, single-threaded settings: it is refit every batch.
    """

    def __init__(self, objective: str = "rank", *, n_estimators: int = 200, max_depth: int = 6,
                 learning_rate: float = 0.1, min_child_weight: float = 1.0,
                 subsample: float = 1.0, colsample_bytree: float = 1.0, nthread: int = 1,
                 pair_method: str = "topk", pairs_per_sample: int = 32, seed: int = 0) -> None:
        if objective not in OBJECTIVES:
            raise ValueError(f"XGBModel: objective must be one of {tuple(OBJECTIVES)}, "
                             f"got {objective!r}")
        self.objective = objective
        self.n_estimators = n_estimators
        self.params: dict[str, Any] = {
            "objective": OBJECTIVES[objective], "max_depth": max_depth, "eta": learning_rate,
            "min_child_weight": min_child_weight, "subsample": subsample,
            "colsample_bytree": colsample_bytree, "tree_method": "hist", "nthread": nthread,
            "seed": seed, "verbosity": 0,
        }
        if objective == "rank":
            # "topk" pairs each of the best rows with the others: the search only needs the
            # head of the order right. On measured matmuls it gave a better top-10 recall than
            # "mean" (all pairs sampled) at half the fit time (tests/costmodel/data).
            self.params.update(lambdarank_pair_method=pair_method,
                               lambdarank_num_pair_per_sample=pairs_per_sample)
        self._booster: Any = None
        self.n_features: int | None = None

    @property
    def fitted(self) -> bool:
        return self._booster is not None

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None
            ) -> XGBModel:
        """Train on rows ``X`` with throughputs ``y`` (any scale; normalised per group)."""
        import xgboost as xgb  # deferred: importing the package must stay cheap
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or len(X) != len(y):
            raise ValueError(f"XGBModel.fit: X has shape {X.shape} but y has {len(y)} labels")
        g = np.zeros(len(X), dtype=np.int64) if groups is None else _group_ids(groups)
        labels = normalize_labels(y, g)
        order = np.argsort(g, kind="stable")  # qid must be sorted
        kwargs: dict[str, Any] = {}
        if self.objective == "rank":
            kwargs["qid"] = g[order]
        dtrain = xgb.DMatrix(X[order], label=labels[order], missing=np.nan, **kwargs)
        self._booster = xgb.train(self.params, dtrain, num_boost_round=self.n_estimators)
        self.n_features = X.shape[1]
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Scores of rows ``X`` (float64; only their order within a workload is meaningful)."""
        if self._booster is None:
            raise RuntimeError("XGBModel.predict: the model is not fitted")
        X = np.asarray(X, dtype=np.float32)
        if len(X) == 0:
            return np.zeros(0)
        return np.asarray(self._booster.inplace_predict(X, missing=np.nan), dtype=np.float64)


def _group_ids(groups: np.ndarray) -> np.ndarray:
    """Dense integer ids for arbitrary group labels (e.g. workload keys)."""
    _, ids = np.unique(np.asarray(groups), return_inverse=True)
    return ids.astype(np.int64)


def rankdata(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``x`` with ties given their average rank."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(1, len(x) + 1)
    _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=ranks)
    return sums[inv] / counts[inv]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman rank correlation (0 when either side is constant)."""
    ra, rb = rankdata(a), rankdata(b)
    ra -= ra.mean()
    rb -= rb.mean()
    den = np.sqrt((ra * ra).sum() * (rb * rb).sum())
    return float((ra * rb).sum() / den) if den > 0 else 0.0


def top_k_recall(scores: np.ndarray, y: np.ndarray, k: int) -> float:
    """Share of the ``k`` truly best rows (by ``y``) among the ``k`` best-scored rows."""
    k = min(k, len(y))
    if k <= 0:
        return 0.0
    true_top = set(np.argsort(-np.asarray(y), kind="stable")[:k].tolist())
    pred_top = np.argsort(-np.asarray(scores), kind="stable")[:k].tolist()
    return len(true_top.intersection(pred_top)) / k


def quality(model: Any, X: np.ndarray, y: np.ndarray, k: int = 10) -> dict[str, float]:
    """Held-out quality of ``model`` on rows of ONE workload: top-k recall and Spearman."""
    scores = model.predict(X)
    return {"top_k_recall": top_k_recall(scores, y, k), "spearman": spearman(scores, y),
            "k": float(min(k, len(y)))}
