"""autotune: learned-cost-model autotuning of tensor operators.

The public API is re-exported here lazily, so that ``import autotune`` stays cheap and
importing one part (say the database) does not pull in the compiler.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from autotune.version import __version__ as __version__

# name -> "module" or "module:attribute". The space of a workload is ``config_space``:
# ``autotune.space`` is the subpackage of knobs, and a function of that name would be
# shadowed by it as soon as the subpackage is imported.
_EXPORTS = {
    "Workload": "autotune.ops",
    "workload": "autotune.ops",
    "Target": "autotune.target",
    "Config": "autotune.space",
    "ConfigSpace": "autotune.space",
    "config_space": "autotune.driver",
    "lower": "autotune.driver",
    "compile": "autotune.driver",
    "simulate_cuda": "autotune.driver",
    "CudaExecutionError": "autotune.codegen.cuda.simulate",
    "Kernel": "autotune.codegen.kernel",
    "tune": "autotune.api",
    "best": "autotune.api",
    "build": "autotune.api",
    "TuneResult": "autotune.api",
    "BestRecord": "autotune.api",
    # models (torch is imported when these are called, not here)
    "extract": "autotune.frontend.torch",
    "tune_model": "autotune.frontend.tuning",
    "compile_model": "autotune.frontend.runtime",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # what `__getattr__` returns, for type checkers (imported lazily at run time)
    from autotune.api import BestRecord as BestRecord
    from autotune.api import TuneResult as TuneResult
    from autotune.api import best as best
    from autotune.api import build as build
    from autotune.api import tune as tune
    from autotune.codegen.cuda.simulate import CudaExecutionError as CudaExecutionError
    from autotune.codegen.kernel import Kernel as Kernel
    from autotune.driver import compile as compile  # noqa: A004
    from autotune.driver import config_space as config_space
    from autotune.driver import lower as lower
    from autotune.driver import simulate_cuda as simulate_cuda
    from autotune.frontend.runtime import compile_model as compile_model
    from autotune.frontend.torch import extract as extract
    from autotune.frontend.tuning import tune_model as tune_model
    from autotune.ops import Workload as Workload
    from autotune.ops import workload as workload
    from autotune.space import Config as Config
    from autotune.space import ConfigSpace as ConfigSpace
    from autotune.target import Target as Target


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    module, _, attr = where.partition(":")
    return getattr(importlib.import_module(module), attr or name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
