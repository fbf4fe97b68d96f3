"""Schedule templates: one module per (operator, target kind).

A template module defines ``space(workload, target) -> ConfigSpace`` and
``schedule(workload, target, config) -> Schedule``.
"""
from __future__ import annotations

import importlib
from types import ModuleType

_TEMPLATES: dict[tuple[str, str], str] = {
    ("matmul", "llvm"): "cpu_matmul",
    ("batch_matmul", "llvm"): "cpu_matmul",
    ("conv2d", "llvm"): "cpu_conv2d",
    ("depthwise_conv2d", "llvm"): "cpu_depthwise",
    ("matmul", "cuda"): "cuda_matmul",
    ("batch_matmul", "cuda"): "cuda_matmul",
    ("conv2d", "cuda"): "cuda_conv2d",
    ("depthwise_conv2d", "cuda"): "cuda_depthwise",
}


def get_template(op: str, target_kind: str) -> ModuleType:
    """The template module for ``op`` on targets of ``target_kind``."""
    name = _TEMPLATES.get((op, target_kind))
    if name is None:
        raise ValueError(f"no schedule template for op {op!r} on target kind {target_kind!r}")
    return importlib.import_module(f"autotune.schedule.templates.{name}")
