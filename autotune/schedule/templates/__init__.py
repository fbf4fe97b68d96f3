"""Schedule templates: one module per (operator, target kind, element type).

A template module defines ``space(workload, target) -> ConfigSpace`` and either
``schedule(workload, target, config) -> Schedule`` (lowered by `autotune.schedule.lower`)
or ``lower(workload, target, config) -> PrimFunc`` (a loop AST built directly, as the
tensor-core templates do: their warp-level statements have no Schedule primitive).
float16/bfloat16 matmul, batch_matmul and conv2d on cuda use ``cuda_tensorcore`` (wmma),
except on sm_90a, where matmul, batch_matmul and NHWC conv2d whose rows TMA can copy use
``cuda_wgmma`` (see `template_for`); depthwise_conv2d keeps its template in every dtype
(CUDA cores, float32 accumulation).
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from autotune.ops.dtypes import HALF_DTYPES

if TYPE_CHECKING:
    from autotune.ops import Workload
    from autotune.target import Target

_TEMPLATES: dict[tuple[str, str], str] = {
    ("matmul", "llvm"): "cpu_matmul",
    ("batch_matmul", "llvm"): "cpu_matmul",
    ("conv2d", "llvm"): "cpu_conv2d",
    ("depthwise_conv2d", "llvm"): "cpu_depthwise",
    ("max_pool2d", "llvm"): "cpu_pool",
    ("global_avg_pool2d", "llvm"): "cpu_channelwise",
    ("channel_mul", "llvm"): "cpu_channelwise",
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


def template_for(workload: "Workload", target: "Target") -> ModuleType:
    """The template of ``workload`` on ``target``: `get_template`'s, but on an sm_90a
    target a half matmul or batch_matmul takes the wgmma template where TMA can copy its
    operands (rows a multiple of 16 bytes), else keeps wmma's."""
    if target.kind == "cuda" and target.arch == "sm_90a" and workload.dtype in HALF_DTYPES:
        wgmma = importlib.import_module("autotune.schedule.templates.cuda_wgmma")
        if wgmma.workload_reason(workload) is None:
            return wgmma
    return get_template(workload.op, target.kind, workload.dtype)
