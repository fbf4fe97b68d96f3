"""`Tuner`: the ask/tell interface every search strategy implements.

The base class owns the bookkeeping that every strategy needs and must get right: it never
hands out a config twice or one already measured, keeps proposals inside an optional replay
pool, starts the first batch with the template's default config (a search then never ends
below the schedule one gets without tuning), tops a short batch up with random configs, and
tracks the best config seen. Subclasses only implement `_propose` (ask) and, if they learn,
`_observe` (tell); a tuner with a cost model also answers `predicted` (the score it gave a
config when proposing it) and `model_scores` (its current model's scores of any configs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, AbstractSet, Any, ClassVar, Iterable, Mapping, Optional, Sequence

import numpy as np

from autotune.ops import Workload
from autotune.search.options import Option, resolve_options
from autotune.search.store import SearchStore
from autotune.target import Target

if TYPE_CHECKING:
    from autotune.measure.result import MeasureInput, MeasureResult
    from autotune.space import Config, ConfigSpace


START_DEFAULT = Option(
    "start_default", "measure the template's default config first, so that the search never "
    "ends below the untuned schedule (False: a pure strategy, for comparing strategies)", True)


@dataclass(frozen=True)
class TuningTask:
    """What a tuner may need beyond the space (model features, transfer learning).

    ``db``: the store whose ``history`` a tuner may learn from; None: no history.
    """

    workload: Optional[Workload] = None
    target: Optional[Target] = None
    db: Optional[SearchStore] = None


class Tuner:
    """Ask (`next_batch`) / tell (`update`) search over a `ConfigSpace`.

    ``measured``: indices never to propose (already in the database). ``pool``: when given,
    only these indices may be proposed (replay mode). ``options`` are checked against OPTIONS.
    """

    name: ClassVar[str] = ""
    OPTIONS: ClassVar[tuple[Option, ...]] = ()  # the tuner's own (see `options_table`)

    @classmethod
    def options_table(cls) -> tuple[Option, ...]:
        """Every option this tuner takes: the ones all tuners share, then its own."""
        return (START_DEFAULT, *cls.OPTIONS)

    def __init__(self, space: "ConfigSpace", *, seed: int | np.random.Generator = 0,
                 measured: AbstractSet[int] = frozenset(),
                 pool: Optional[AbstractSet[int]] = None, task: Optional[TuningTask] = None,
                 **options: Any) -> None:
        self.space = space
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self.options: Mapping[str, Any] = resolve_options(
            self.name or type(self).__name__, self.options_table(), options)
        self.task = task or TuningTask()
        size = space.size
        self.pool: Optional[frozenset[int]] = (
            None if pool is None else frozenset(i for i in pool if 0 <= i < size))
        self._universe = size if self.pool is None else len(self.pool)
        # Proposed or measured: never proposed again. Only admissible indices count, so
        # that `has_next` can compare sizes.
        self._visited: set[int] = {i for i in measured if self._in_universe(i)}
        self.best_config: Optional["Config"] = None
        self.best_score = 0.0  # throughput of best_config in calls per second (1 / cost)
        self.observed = 0
        self._default_offered = False

    # --- the interface ---------------------------------------------------------------
    def next_batch(self, n: int) -> list["Config"]:
        """Up to ``n`` distinct configs never proposed or measured (fewer: space exhausted)."""
        if n <= 0:
            return []
        batch: list[Config] = []
        taken: set[int] = set()
        if not self._default_offered and self.options["start_default"]:
            self._default_offered = True  # (not when measured before or outside the pool)
            default = self.space.default()
            if self._admissible(default.index):
                batch.append(default)
                taken.add(default.index)
        for cfg in self._propose(n):
            if len(batch) == n:
                break
            if cfg.index not in taken and self._admissible(cfg.index):
                batch.append(cfg)
                taken.add(cfg.index)
        if len(batch) < n:
            batch.extend(self._random(n - len(batch), taken))
        self._visited.update(c.index for c in batch)
        return batch

    def predicted(self, config: "Config") -> float | None:
        """The model's score of a config this tuner proposed (higher: faster), if it has one."""
        return None

    def model_scores(self, configs: Sequence["Config"]) -> list[float] | None:
        """The current model's score of each config (higher: faster; -inf: it cannot score
        it), all on that model's one scale; None for a tuner without a model, or before it
        has one. Scores of different model versions (refits) do not compare.

        `tune_loop` scores the job's measured configs with it after each refit, for the
        dashboard's score-vs-measured scatter.
        """
        return None

    def update(self, inputs: Sequence["MeasureInput"], results: Sequence["MeasureResult"]) -> None:
        """Learn from measurements (of proposed configs, or history fed in by the loop)."""
        configs = [inp.config for inp in inputs]
        scores = [1.0 / r.cost if r.ok and r.cost > 0 else 0.0 for r in results]
        for cfg, score in zip(configs, scores):
            if self._in_universe(cfg.index):
                self._visited.add(cfg.index)
            if score > self.best_score:
                self.best_config, self.best_score = cfg, score
        self.observed += len(configs)
        self._observe(configs, scores)

    def has_next(self) -> bool:
        """Whether any config is left to propose."""
        return len(self._visited) < self._universe

    def close(self) -> None:
        """Release what the tuner holds beyond memory (worker processes); idempotent."""

    # --- hooks for subclasses ------------------------------------------------------------
    def _propose(self, n: int) -> Iterable["Config"]:
        """Candidates for the next batch, best first; the base class filters and tops up."""
        return ()

    def _observe(self, configs: Sequence["Config"], scores: Sequence[float]) -> None:
        """Scores are throughputs (1 / cost in seconds); 0 for a failed measurement."""

    # --- helpers for subclasses ------------------------------------------------------------
    def _admissible(self, index: int) -> bool:
        """Whether ``index`` may still be proposed."""
        return index not in self._visited and self._in_universe(index)

    def _in_universe(self, index: int) -> bool:
        return 0 <= index < self.space.size and (self.pool is None or index in self.pool)

    def _random(self, n: int, taken: AbstractSet[int] = frozenset()) -> list["Config"]:
        """Up to ``n`` uniformly random admissible configs, none in ``taken``."""
        if n <= 0:
            return []
        if self.pool is None:
            exclude = self._visited | set(taken) if taken else self._visited
            return self.space.sample(self.rng, n, exclude=exclude)
        left = [i for i in self.pool if i not in self._visited and i not in taken]
        if not left:
            return []
        left.sort()  # set order varies between processes; sorting keeps seeds reproducible
        picks = self.rng.choice(len(left), size=min(n, len(left)), replace=False)
        return [self.space.get(left[int(p)]) for p in picks]
