"""Models as the unit of work: extract a PyTorch model's tasks, tune them under one budget,
run the model on the tuned kernels. torch is imported only by the functions that need it
(the `torch` extra); the scheduler and `tune_tasks` work without it.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "extract": "autotune.frontend.torch",
    "compile_model": "autotune.frontend.runtime",
    "plan_model": "autotune.frontend.runtime",
    "PlannedKernel": "autotune.frontend.runtime",
    "tune_model": "autotune.frontend.tuning",
    "tune_tasks": "autotune.frontend.tuning",
    "ModelTuneResult": "autotune.frontend.tuning",
    "ModelTasks": "autotune.frontend.tasks",
    "Task": "autotune.frontend.tasks",
    "Unsupported": "autotune.frontend.tasks",
    "ModelProgress": "autotune.frontend.progress",
    "CudaGraphModel": "autotune.frontend.cuda_graphs",
    "CudaGraphWarning": "autotune.frontend.cuda_graphs",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'autotune.frontend' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
