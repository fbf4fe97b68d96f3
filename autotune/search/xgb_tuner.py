"""Model-guided search: an XGBoost cost model steers parallel simulated-annealing chains.

Each round the chains (kept across rounds) walk the space by neighbour steps and mutations;
the batch is picked from the best unmeasured candidates with a diversity filter, plus a
small share of random configs. The model is refit after every ``update``. With ``transfer``
and a database, a base model trained on other workloads of the same operator steers the
first rounds and fades as records come.

Loop-AST features cost about a millisecond per new config (lowering dominates; see
benchmarks/features.py), too slow to score tens of thousands of annealing steps. So by
default (``sa_model="knob"``) the chains walk a twin model fitted on knob values (~50k
configs/s) and only the best ``rerank`` configs they visit are scored by the main model.
``sa_model="main"`` anneals on the main model itself, at most ``sa_budget`` new rows a round.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np

from autotune.costmodel.annealing import Annealer
from autotune.costmodel.cache import FeatureCache, features_for, invalid_rows
from autotune.costmodel.features import CURVE_SLICE, knob_features
from autotune.costmodel.model import XGBModel
from autotune.costmodel.transfer import BaseModel, blend
from autotune.search.base import Tuner
from autotune.search.options import Option
from autotune.space import Config

log = logging.getLogger(__name__)


class XGBTuner(Tuner):
    """XGBoost cost model + simulated annealing (the default tuner)."""

    name = "xgb"
    OPTIONS = (
        # "curve" by default: with the few records of a young job its 137 columns rank
        # better than all 1294 (replayed pools, 100+ draws of 16-64 records: the first
        # 90%-config came 1.2-2x sooner on matmul, conv2d and depthwise)
        Option("features", "what the model sees: loop-AST features, their structure-free "
               "curve block, or knob values", "curve", choices=("ast", "curve", "knob")),
        Option("objective", "model objective", "rank", choices=("rank", "reg")),
        Option("sa_model", "what the annealing chains walk: a twin model on knob values, "
               "re-ranked by the main model, or the main model itself", "knob",
               choices=("knob", "main")),
        Option("n_chains", "parallel annealing chains", 64, minimum=1),
        Option("sa_steps", "annealing steps per round", 64, minimum=1),
        Option("rerank", "configs the twin's walk hands to the main model per round", 256,
               minimum=1),
        Option("sa_budget", "with sa_model='main': new (uncached) feature rows per round",
               1024, minimum=1),
        Option("exhaustive", "score every admissible config instead of annealing when "
               "there are at most this many", 2048, minimum=0),
        Option("temperature", "initial annealing temperature, in score standard deviations",
               1.0, minimum=0.0),
        Option("epsilon", "share of each batch picked at random", 0.05, minimum=0.0,
               maximum=1.0),
        Option("diversity", "most knobs two picks of a batch may share, as a fraction", 0.85,
               minimum=0.0, maximum=1.0),
        Option("min_records", "own records needed before the model steers (the random "
               "initial design)", 16, minimum=1),
        Option("transfer", "seed the model with other workloads' records (needs a database)",
               True),
        Option("n_estimators", "boosting rounds per fit", 200, minimum=1),
        Option("max_depth", "tree depth", 6, minimum=1),
        Option("cache_size", "feature rows kept", 16384, minimum=1),
    )

    def __init__(self, space: Any, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        task = self.task
        # AST features need a workload and target to lower; without them only knobs remain
        self.kind = self.options["features"] if task.workload is not None else "knob"
        self.cache = FeatureCache(self.options["cache_size"])
        self.annealer = Annealer(space, self.rng, self.options["n_chains"],
                                 self.options["sa_steps"], self.options["temperature"])
        self._configs: list[Config] = []
        self._scores: list[float] = []
        self._predicted: dict[int, float] = {}  # model scores of the last proposed batch
        self._rows: list[np.ndarray] = []
        self._knob_rows: list[np.ndarray] = []
        self.own: XGBModel | None = None
        self.twin: XGBModel | None = None  # on knob rows, for the annealing walk
        self.base: BaseModel | None = None
        self._base_loaded = False

    # --- features and models -------------------------------------------------------------
    def _ast(self, configs: Sequence[Config]) -> np.ndarray:
        return features_for(self.task.workload, self.task.target, configs, "ast", self.cache)

    def _own_rows(self, configs: Sequence[Config], ast: np.ndarray | None = None
                  ) -> np.ndarray:
        """The rows the job's own model sees (``ast``: already computed "ast" rows)."""
        if self.kind == "knob":
            return knob_features(self.space, configs)
        if ast is None:
            ast = self._ast(configs)
        return ast if self.kind == "ast" else ast[:, CURVE_SLICE]

    def _load_base(self) -> None:
        """Build the transfer base model once, from other workloads' history."""
        if self._base_loaded:
            return
        self._base_loaded = True
        task = self.task
        if not self.options["transfer"] or task.db is None or task.workload is None:
            return
        try:
            history = task.db.history(task.workload.op, task.target.kind,
                                      exclude_workload_key=task.workload.key)
        except Exception as exc:  # history only helps: a failure to read it must not stop a job
            log.warning("xgb tuner: no transfer history (%s)", exc)
            return
        self.base = BaseModel.from_history(history, task.target, exclude=task.workload.key,
                                           seed=int(self.rng.integers(2**31)))

    def _observe(self, configs: Sequence[Config], scores: Sequence[float]) -> None:
        self._configs.extend(configs)
        self._scores.extend(scores)
        # training rows are kept here, not only in the LRU cache the annealing churns through
        self._rows.append(self._own_rows(configs))
        twin = self.options["sa_model"] == "knob" and self.kind != "knob"
        if twin:
            self._knob_rows.append(knob_features(self.space, configs))
        if len(self._configs) < self.options["min_records"] or max(self._scores) <= 0:
            return
        y = np.asarray(self._scores)
        self.own = self._new_model().fit(np.concatenate(self._rows), y)
        if twin:
            self.twin = self._new_model().fit(np.concatenate(self._knob_rows), y)
        elif self.options["sa_model"] == "knob":
            self.twin = self.own  # the main model already reads knob rows

    def _new_model(self) -> XGBModel:
        return XGBModel(self.options["objective"], n_estimators=self.options["n_estimators"],
                        max_depth=self.options["max_depth"], seed=int(self.rng.integers(2**31)))

    def ready(self) -> bool:
        """Whether a model (own or transferred) can score candidates yet."""
        self._load_base()
        return self.own is not None or self.base is not None

    def score(self, configs: Sequence[Config]) -> np.ndarray:
        """Model scores of ``configs`` (higher is faster); -inf for configs that fail to lower."""
        if not configs:
            return np.zeros(0)
        ast = self._ast(configs) if self.kind != "knob" or self.base is not None else None
        own = self.own.predict(self._own_rows(configs, ast)) if self.own is not None else None
        if self.base is None:
            s = np.asarray(own, dtype=np.float64)
        else:
            s = blend(self.base.predict(ast), own, len(self._configs))
        if ast is not None:
            s[invalid_rows(ast)] = -np.inf
        return s

    # --- search --------------------------------------------------------------------------
    def _propose(self, n: int) -> list[Config]:
        if not self.ready():
            return []  # no data yet: the base class fills the batch at random
        n_random = round(self.options["epsilon"] * n)
        candidates = self._candidates(n)
        self._predicted = {c.index: v for v, c in candidates}
        # the base class tops the batch up with random configs
        return self._diverse(candidates, n - n_random)

    def predicted(self, config: Config) -> float | None:
        return self._predicted.get(config.index)

    def _candidates(self, n: int) -> list[tuple[float, Config]]:
        """Scored admissible candidates, best first."""
        opts = self.options
        if self._universe - len(self._visited) <= opts["exhaustive"]:
            configs = self._all_admissible()
            s = self.score(configs)
            return sorted(((float(v), c) for v, c in zip(s, configs) if v > -np.inf),
                          key=lambda t: (-t[0], t[1].index))
        self._seed_chains()
        keep = max(opts["rerank"], 4 * n)
        if self.twin is not None:
            visited = self.annealer.run(self._twin_score, keep, self._admissible)
            configs = [c for _, c in visited]
            s = self.score(configs)
            return sorted(((float(v), c) for v, c in zip(s, configs) if v > -np.inf),
                          key=lambda t: (-t[0], t[1].index))
        budget = [opts["sa_budget"]]

        def afford(proposals: Sequence[Config]) -> bool:
            if self.kind == "knob" and self.base is None:
                return True  # knob rows are computed, not lowered: nothing to ration
            budget[0] -= sum(1 for c in proposals if c.index not in self.cache)
            return budget[0] >= 0

        return self.annealer.run(self.score, keep, self._admissible, afford)

    def _twin_score(self, configs: Sequence[Config]) -> np.ndarray:
        assert self.twin is not None
        return self.twin.predict(knob_features(self.space, configs))

    def _all_admissible(self) -> list[Config]:
        if self.pool is not None:
            return [self.space.get(i) for i in sorted(self.pool) if i not in self._visited]
        return [c for c in self.space if c.index not in self._visited]

    def _seed_chains(self) -> None:
        """Chains start at the best measured configs (a quarter of them) and random points."""
        order = np.argsort(-np.asarray(self._scores), kind="stable")
        best = [self._configs[int(i)] for i in order[: max(1, self.annealer.n_chains // 4)]
                if self._scores[int(i)] > 0]
        self.annealer.seed(best)

    @property
    def chains(self) -> list[Config]:
        """The annealing chains' current points."""
        return self.annealer.chains

    def _diverse(self, ranked: list[tuple[float, Config]], n: int) -> list[Config]:
        """Greedy best-first picks sharing at most ``diversity`` of their knobs with an
        earlier pick; the rest of the batch, if short, from the best of the remainder."""
        if n <= 0 or not ranked:
            return []
        configs = [c for _, c in ranked]
        digits = self.space.encode(configs)
        limit = self.options["diversity"] * digits.shape[1]
        chosen: list[int] = []
        for i in range(len(configs)):
            if len(chosen) == n:
                break
            if chosen and (digits[chosen] == digits[i]).sum(axis=1).max() > limit:
                continue
            chosen.append(i)
        if len(chosen) < n:
            taken = set(chosen)
            chosen += [i for i in range(len(configs)) if i not in taken][: n - len(chosen)]
        return [configs[i] for i in chosen]
