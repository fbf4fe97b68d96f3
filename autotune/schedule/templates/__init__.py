"""Schedule templates: one module per (operator, target kind, element type).

A template module defines ``space(workload, target) -> ConfigSpace`` and either
``schedule(workload, target, config) -> Schedule`` (lowered by `autotune.schedule.lower`)
or ``lower(workload, target, config) -> PrimFunc`` (a loop AST built directly, as the
tensor-core template does: its warp-level statements have no Schedule primitive).
float16/bfloat16 matmul, batch_matmul and conv2d on cuda use ``cuda_tensorcore``;
depthwise_conv2d keeps its template in every dtype (CUDA cores, float32 accumulation).
"""
from __future__ import annotations

import importlib
from types import ModuleType

from autotune.ops.dtypes import HALF_DTYPES

_TEMPLATES: dict[tuple[str, str], str] = {
    ("matmul", "llvm"): "cpu_matmul",
    ("batch_matmul", "llvm"): "cpu_matmul",
    ("conv2d", "llvm"): "cpu_conv2d",
    ("depthwise_conv2d", "llvm"): "cpu_depthwise",
    ("max_pool2d", "llvm"): "cpu_pool",
    ("matmul", "cuda"): "cuda_matmul",
    ("batch_matmul", "cuda"): "cuda_matmul",
    ("conv2d", "cuda"): "cuda_conv2d",
    ("depthwise_conv2d", "cuda"): "cuda_depthwise",
}
# half-precision workloads run on the tensor cores
_HALF_TEMPLATES: dict[tuple[str, str], str] = {
    ("matmul", "cuda"): "cuda_tensorcore",
    ("batch_matmul", "cuda"): "cuda_tensorcore",
    ("conv2d", "cuda"): "cuda_tensorcore",
    ("depthwise_conv2d", "cuda"): "cuda_depthwise",
}

def get_template(op: str, target_kind: str, dtype: str = "float32") -> ModuleType:
    """The template module for ``op`` on targets of ``target_kind`` with ``dtype`` data."""
    table = _HALF_TEMPLATES if dtype in HALF_DTYPES else _TEMPLATES
    name = table.get((op, target_kind))
    if name is None:
        raise ValueError(f"no schedule template for op {op!r} on target kind {target_kind!r}"
                         + (f" with dtype {dtype!r}" if dtype != "float32" else ""))
    return importlib.import_module(f"autotune.schedule.templates.{name}")
