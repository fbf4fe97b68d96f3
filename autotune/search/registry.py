"""The table of tuners by name, loaded lazily (a tuner may import a heavy library).

Adding a tuner is one module defining a `Tuner` subclass and one line in `TUNERS`.
"""
from __future__ import annotations

import importlib
from types import MappingProxyType
from typing import TYPE_CHECKING, AbstractSet, Any, Mapping, Optional

import numpy as np

from autotune.search.base import Tuner, TuningTask
from autotune.search.options import Option

if TYPE_CHECKING:
    from autotune.space import ConfigSpace

# name -> "module:Class"
TUNERS: Mapping[str, str] = MappingProxyType({
    "random": "autotune.search.random_tuner:RandomTuner",
    "grid": "autotune.search.grid_tuner:GridTuner",
    "ga": "autotune.search.ga_tuner:GATuner",
    "xgb": "autotune.search.xgb_tuner:XGBTuner",
})

# The model-guided tuner is the default once it is in the table.
DEFAULT_TUNER: str = "xgb" if "xgb" in TUNERS else "ga"


def tuner_class(name: str) -> type[Tuner]:
    """The class of tuner ``name``; ValueError naming the known tuners otherwise."""
    path = TUNERS.get(name) if isinstance(name, str) else None
    if path is None:
        raise ValueError(f"unknown tuner {name!r}; known tuners: {', '.join(TUNERS)}")
    module, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise ValueError(f"tuner {name!r} is unavailable: {exc}") from exc


def tuner_options(name: str) -> tuple[Option, ...]:
    """The options table of tuner ``name``."""
    return tuner_class(name).options_table()


def describe_tuners() -> list[dict[str, Any]]:
    """JSON-able list of the tuners with their options (for the CLI, REST API and docs)."""
    out = []
    for name in TUNERS:
        cls = tuner_class(name)
        doc = (cls.__doc__ or "").strip().splitlines()
        out.append({"name": name, "description": doc[0] if doc else "", "default": name ==
                    DEFAULT_TUNER, "options": [opt.describe() for opt in cls.options_table()]})
    return out


def make_tuner(name: str, space: "ConfigSpace", *, seed: int | np.random.Generator = 0,
               measured: AbstractSet[int] = frozenset(),
               pool: Optional[AbstractSet[int]] = None, task: Optional[TuningTask] = None,
               **options: Any) -> Tuner:
    """A tuner by name; ValueError naming a bad tuner or option."""
    return tuner_class(name)(space, seed=seed, measured=measured, pool=pool, task=task, **options)
