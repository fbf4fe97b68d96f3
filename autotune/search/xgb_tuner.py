"""Model-guided search: an XGBoost cost model steers parallel simulated-annealing chains.

Each round the chains (kept across rounds) walk the space by neighbour steps and mutations,
and the batch is picked from the best unmeasured candidates plus a small share of random
configs. The model is a small ensemble (``autotune.costmodel.ensemble``) refit after every
``update``; its members take turns filling the batch, each with its own best pick not too
like the earlier ones (batch Thompson sampling: where few records leave the members in
disagreement, the batch spreads over what each of them believes). With ``transfer``
and a database, a base model trained on other workloads of the same operator steers the
first rounds and fades as records come.

Loop-AST features cost 0.3-0.5 ms per new config on one core (lowering dominates; see
benchmarks/features.py), too slow to score tens of thousands of annealing steps. So by
default (``sa_model="knob"``) the chains walk a twin model fitted on knob values (~250k
configs/s) and only the best ``rerank`` configs they visit are scored by the main model.
``sa_model="main"`` anneals on the main model itself, at most ``sa_budget`` new rows a round.
Large batches of new rows are shared with ``workers`` processes (``FeatureWorkers``).
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from autotune.costmodel.cache import FeatureCache, features_for, invalid_rows
from autotune.costmodel.ensemble import Ensemble
from autotune.costmodel.features import CURVE_SLICE, knob_features
from autotune.costmodel.model import XGBModel
from autotune.costmodel.transfer import BaseModel, blend
from autotune.costmodel.workers import FeatureWorkers, auto_workers
from autotune.driver import kernel_family
from autotune.ops import Workload
from autotune.search.annealing import Annealer
from autotune.search.base import Tuner
from autotune.search.options import Option
from autotune.space import Config
from autotune.target import Target

log = logging.getLogger(__name__)


class XGBTuner(Tuner):
    """XGBoost cost model + simulated annealing (the default tuner)."""

    name = "xgb"
    # Maxima keep one round's host time (a few seconds of annealing, re-ranking and fitting
    # on one core), the feature cache (<= ~350 MB of AST rows) and the processes a job
    # starts bounded; defaults sit well inside them.
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
        Option("n_chains", "parallel annealing chains", 64, minimum=1, maximum=1024),
        Option("sa_steps", "annealing steps per round", 64, minimum=1, maximum=1024),
        Option("rerank", "configs the twin's walk hands to the main model per round", 256,
               minimum=1, maximum=8192),
        Option("sa_budget", "with sa_model='main': new (uncached) feature rows per round",
               1024, minimum=1, maximum=8192),
        Option("exhaustive", "score every admissible config instead of annealing when "
               "there are at most this many", 2048, minimum=0, maximum=16384),
        Option("temperature", "initial annealing temperature, in score standard deviations",
               1.0, minimum=0.0, maximum=100.0),
        # 4 members on 70% of the rows per tree: over 100 replayed seeds the median trials
        # to 90% of each pool's best went 34.5 -> 31 (matmul), 30 -> 27 (conv2d), 35 -> 35.5
        # (depthwise; geometric means 31.3 -> 29.1, 27.0 -> 24.7, 32.2 -> 30.4)
        Option("members", "models in the ensemble; each picks its share of a batch", 4,
               minimum=1, maximum=16),
        Option("subsample", "share of the records each member's trees are fit on", 0.7,
               minimum=0.05, maximum=1.0),
        Option("epsilon", "share of each batch picked at random", 0.05, minimum=0.0,
               maximum=1.0),
        Option("diversity", "most knobs a pick may share with an earlier one, as a fraction", 0.85,
               minimum=0.0, maximum=1.0),
        Option("min_records", "own records needed before the model steers (the random "
               "initial design)", 16, minimum=1, maximum=4096),
        Option("transfer", "seed the model with other workloads' records (needs a database)",
               True),
        Option("n_estimators", "boosting rounds per fit", 200, minimum=1, maximum=2000),
        Option("max_depth", "tree depth", 6, minimum=1, maximum=16),
        Option("cache_size", "feature rows kept", 16384, minimum=1, maximum=65536),
        Option("workers", "processes that lower new configs beside the tuner's own, for "
               "large batches (-1: one per further core, at most 3; 0: none)", -1,
               minimum=-1, maximum=8),
    )

    def __init__(self, space: Any, **kwargs: Any) -> None:
        super().__init__(space, **kwargs)
        task = self.task
        # AST features need a workload and target to lower; without them only knobs remain
        self.kind = self.options["features"] if task.workload is not None else "knob"
        self.cache = FeatureCache(self.options["cache_size"])
        n_workers = self.options["workers"]
        n_workers = auto_workers() if n_workers < 0 else n_workers
        # started at the first large batch of new rows: knob-only jobs never start them
        self.workers = FeatureWorkers(n_workers) if n_workers else None
        self.annealer = Annealer(space, self.rng, self.options["n_chains"],
                                 self.options["sa_steps"], self.options["temperature"])
        self._configs: list[Config] = []
        self._scores: list[float] = []
        self._predicted: dict[int, float] = {}  # model scores of the last proposed batch
        self._rows: list[np.ndarray] = []
        self._knob_rows: list[np.ndarray] = []
        self.own: Ensemble | None = None
        self.twin: XGBModel | Ensemble | None = None  # on knob rows, for the annealing walk
        self.base: BaseModel | None = None
        self._base_loaded = False

    # --- features and models -------------------------------------------------------------
    def _ast(self, configs: Sequence[Config]) -> np.ndarray:
        return features_for(self.task.workload, self.task.target, configs, "ast", self.cache,
                            workers=self.workers)

    def close(self) -> None:
        if self.workers is not None:
            self.workers.close()

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
        if not self.options["transfer"] or task.db is None or task.workload is None \
                or task.target is None:
            return
        try:
            history = task.db.history(task.workload.op, task.target.kind,
                                      exclude_workload_key=task.workload.key)
        except Exception as exc:  # history only helps: a failure to read it must not stop a job
            log.warning("xgb tuner: no transfer history (%s)", exc)
            return
        # each template learns from its own kernels: SIMT (float32), wmma or wgmma (half;
        # float16 and bfloat16 share one template)
        family = kernel_family(task.workload, task.target)
        self.base = BaseModel.from_history(history, task.target, exclude=task.workload.key,
                                           workers=self.workers,
                                           seed=int(self.rng.integers(2**31)),
                                           keep=partial(_of_family, family))

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
        opts = self.options
        self.own = Ensemble(self._new_model, opts["members"], opts["subsample"],
                            seed=int(self.rng.integers(2**31))).fit(np.concatenate(self._rows), y)
        if twin:
            self.twin = self._new_model().fit(np.concatenate(self._knob_rows), y)
        elif self.options["sa_model"] == "knob":
            self.twin = self.own  # the main model already reads knob rows

    def _new_model(self, seed: int | None = None, subsample: float = 1.0) -> XGBModel:
        return XGBModel(self.options["objective"], n_estimators=self.options["n_estimators"],
                        max_depth=self.options["max_depth"], subsample=subsample,
                        seed=int(self.rng.integers(2**31)) if seed is None else seed)

    def ready(self) -> bool:
        """Whether a model (own or transferred) can score candidates yet."""
        self._load_base()
        return self.own is not None or self.base is not None

    def score(self, configs: Sequence[Config]) -> np.ndarray:
        """Model scores of ``configs`` (higher is faster); -inf for configs that fail to lower."""
        if not configs:
            return np.zeros(0)
        return self._member_scores(configs).mean(axis=0)

    def _member_scores(self, configs: Sequence[Config]) -> np.ndarray:
        """Scores of ``configs`` by each ensemble member (blended with the base model when
        there is one; the base alone before the job's own model), shape (members, n)."""
        ast = self._ast(configs) if self.kind != "knob" or self.base is not None else None
        each = None if self.own is None else self.own.predict_each(self._own_rows(configs, ast))
        if self.base is None:
            assert each is not None
            s = each
        else:
            assert ast is not None  # the base model always scores AST rows
            b = self.base.predict(ast)
            n_own = len(self._configs)
            s = np.stack([blend(b, e, n_own) for e in each]) if each is not None else \
                blend(b, None, n_own)[None]
        if ast is not None:
            s[:, invalid_rows(ast)] = -np.inf
        return s

    # --- search --------------------------------------------------------------------------
    def _propose(self, n: int) -> list[Config]:
        if not self.ready():
            return []  # no data yet: the base class fills the batch at random
        n_random = round(self.options["epsilon"] * n)
        configs, each = self._candidates(n)
        self._predicted = {c.index: float(v) for c, v in zip(configs, each.mean(axis=0))}
        # the base class tops the batch up with random configs
        return self._pick(configs, each, n - n_random)

    def predicted(self, config: Config) -> float | None:
        return self._predicted.get(config.index)

    def model_scores(self, configs: Sequence[Config]) -> list[float] | None:
        """The members' mean score of each config, as `_propose` ranks candidates (blended
        with the transfer model while it counts); None while there is no model. Measured
        configs' feature rows are in the cache (their `_observe` put them there; every
        scoring marks them recently used), so a couple of thousand cost only the predictions.
        A blend with the transfer model ranks within ``configs``: its scale is theirs."""
        if not self.ready():
            return None
        return [float(v) for v in self.score(configs)]

    def _candidates(self, n: int) -> tuple[list[Config], np.ndarray]:
        """Admissible candidates that lower, best first, and their member scores."""
        opts = self.options
        if self._universe - len(self._visited) <= opts["exhaustive"]:
            return self._ranked(self._all_admissible())
        self._seed_chains()
        keep = max(opts["rerank"], 4 * n)
        if self.twin is not None:
            visited = self.annealer.run(self._twin_score, keep, self._admissible)
            return self._ranked([c for _, c in visited])
        budget = [opts["sa_budget"]]

        def afford(proposals: Sequence[Config]) -> bool:
            if self.kind == "knob" and self.base is None:
                return True  # knob rows are computed, not lowered: nothing to ration
            budget[0] -= sum(1 for c in proposals if c.index not in self.cache)
            return budget[0] >= 0

        # the walk scored by the members' mean; the best visits' rows are cached by now
        visited = self.annealer.run(self.score, keep, self._admissible, afford)
        return self._ranked([c for _, c in visited])

    def _ranked(self, configs: list[Config]) -> tuple[list[Config], np.ndarray]:
        """``configs`` that lower, by the members' mean score (best first, ties by index),
        with their member scores (shape (members, kept))."""
        if not configs:
            return [], np.zeros((1, 0))
        each = self._member_scores(configs)
        mean = each.mean(axis=0)
        keep = [i for i in sorted(range(len(configs)), key=lambda i: (-mean[i], configs[i].index))
                if mean[i] > -np.inf]
        return [configs[i] for i in keep], each[:, keep]

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

    def _pick(self, configs: list[Config], scores: np.ndarray, n: int) -> list[Config]:
        """Up to ``n`` of ``configs``: the members (rows of ``scores``) take turns, each
        taking its best candidate sharing at most ``diversity`` of its knobs with every
        earlier pick, or its best one left when none is that different."""
        if n <= 0 or not configs:
            return []
        digits = self.space.encode(configs)
        limit = self.options["diversity"] * digits.shape[1]
        orders = [np.argsort(-s, kind="stable") for s in scores]
        free = np.isfinite(scores).all(axis=0)  # a config that fails to lower is -inf for all
        shared: np.ndarray = np.zeros(len(configs), dtype=np.int64)  # most knobs shared with a pick
        chosen: list[int] = []
        for slot in range(n):
            order = orders[slot % len(orders)]
            order = order[free[order]]
            if not order.size:
                break
            ok = order[shared[order] <= limit]
            pick = int(ok[0] if ok.size else order[0])
            chosen.append(pick)
            free[pick] = False
            shared = np.maximum(shared, (digits == digits[pick]).sum(axis=1))
        return [configs[i] for i in chosen]


def _of_family(family: str, workload: Workload, target: Target) -> bool:
    """Whether ``workload``'s kernels on ``target`` come from template ``family`` (not when
    the target cannot run it)."""
    try:
        return kernel_family(workload, target) == family
    except ValueError:
        return False
