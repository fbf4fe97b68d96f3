"""autotune: learned-cost-model autotuning of tensor operators.

The public API is re-exported here lazily, so that ``import autotune`` stays cheap and
importing one part (say the database) does not pull in the compiler.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> "module" or "module:attribute". The space of a workload is ``config_space``:
# ``autotune.space`` is the subpackage of knobs, and a function of that name would be
# shadowed by it as soon as the subpackage is imported.
_EXPORTS = {
    "Workload": "autotune.ops",
    "workload": "autotune.ops",
    "Target": "autotune.target",
    "Config": "autotune.space",
    "ConfigSpace": "autotune.space",
    "config_space": "autotune.driver:space",
    "lower": "autotune.driver",
    "compile": "autotune.driver",
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


def __getattr__(name: str) -> Any:
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module 'autotune' has no attribute {name!r}")
    module, _, attr = where.partition(":")
    return getattr(importlib.import_module(module), attr or name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
