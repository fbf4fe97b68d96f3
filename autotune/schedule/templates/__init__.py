"""Schedule templates: one module per kernel design, chosen by `template_for`.

The registry keys on (operator, target kind, element type): float16/bfloat16 matmul,
batch_matmul and conv2d on cuda take ``cuda_tensorcore`` (wmma), depthwise_conv2d keeps
its template in every dtype (CUDA cores, float32 accumulation), and group_conv2d (float32)
takes conv2d's templates, which compute it as a conv over N*groups images. `template_for`
then picks
a variant where the workload's shape, layout or target calls for one: on sm_90a a half
matmul, batch_matmul or NHWC conv2d whose rows TMA can copy takes ``cuda_wgmma``; on a CPU
a one-row matmul (a GEMV) takes ``cpu_gemv``, a channel-blocked conv2d or group_conv2d
``cpu_conv2d_blocked`` and a channel-blocked depthwise conv or max-pool
``cpu_window_blocked``; global_avg_pool2d, channel_mul and channel_affine take
``cpu_channelwise`` and channel_shuffle ``cpu_shuffle`` in every layout. Each comes as a
`Template` (``template.py``), whichever way it makes its loop AST.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

from autotune.ops.dtypes import HALF_DTYPES
from autotune.schedule.templates import (
    cpu_channelwise,
    cpu_conv2d,
    cpu_conv2d_blocked,
    cpu_depthwise,
    cpu_gemv,
    cpu_matmul,
    cpu_pool,
    cpu_shuffle,
    cpu_window_blocked,
    cuda_conv2d,
    cuda_depthwise,
    cuda_matmul,
    cuda_tensorcore,
    cuda_tensorcore_lower,
    cuda_wgmma,
    cuda_wgmma_lower,
)
from autotune.schedule.templates.template import LoopTemplate, ScheduleTemplate, Template

if TYPE_CHECKING:
    from autotune.ops import Workload
    from autotune.target import Target

__all__ = ["GEMV", "WGMMA", "WINDOW_BLOCKED", "LoopTemplate", "ScheduleTemplate", "Template",
           "get_template", "template_for"]

CPU_MATMUL = ScheduleTemplate("cpu_matmul", "cpu_matmul", cpu_matmul.space, cpu_matmul.schedule)
CPU_CONV2D = ScheduleTemplate("cpu_conv2d", "cpu_conv2d", cpu_conv2d.space, cpu_conv2d.schedule)
CUDA_MATMUL = ScheduleTemplate("cuda_matmul", "cuda_matmul", cuda_matmul.space,
                               cuda_matmul.schedule)
CUDA_CONV2D = ScheduleTemplate("cuda_conv2d", "cuda_conv2d", cuda_conv2d.space,
                               cuda_conv2d.schedule)
CUDA_DEPTHWISE = ScheduleTemplate("cuda_depthwise", "cuda_depthwise", cuda_depthwise.space,
                                  cuda_depthwise.schedule)
TENSORCORE = LoopTemplate("cuda_tensorcore", "cuda_tensorcore", cuda_tensorcore.space,
                          cuda_tensorcore_lower.lower)
# variants of a registry entry, chosen by `template_for`
WGMMA = LoopTemplate("cuda_wgmma", "cuda_wgmma", cuda_wgmma.space, cuda_wgmma_lower.lower)
GEMV = ScheduleTemplate("cpu_gemv", "cpu_matmul", cpu_gemv.space, cpu_gemv.schedule)
CONV2D_BLOCKED = ScheduleTemplate("cpu_conv2d_blocked", "cpu_conv2d", cpu_conv2d_blocked.space,
                                  cpu_conv2d_blocked.schedule)
# the blocked window ops, each in its op's kernel family
WINDOW_BLOCKED: Mapping[str, Template] = MappingProxyType({
    op: ScheduleTemplate("cpu_window_blocked", family, cpu_window_blocked.space,
                         cpu_window_blocked.schedule)
    for op, family in (("depthwise_conv2d", "cpu_depthwise"), ("max_pool2d", "cpu_pool"),
                       ("avg_pool2d", "cpu_pool"))})
CPU_POOL = ScheduleTemplate("cpu_pool", "cpu_pool", cpu_pool.space, cpu_pool.schedule)
CPU_CHANNELWISE = ScheduleTemplate("cpu_channelwise", "cpu_channelwise", cpu_channelwise.space,
                                   cpu_channelwise.schedule)
CPU_SHUFFLE = ScheduleTemplate("cpu_channel_shuffle", "cpu_channel_shuffle", cpu_shuffle.space,
                               cpu_shuffle.schedule)

# (op, target kind, half dtype) -> template
_TEMPLATES: Mapping[tuple[str, str, bool], Template] = MappingProxyType({
    ("matmul", "llvm", False): CPU_MATMUL,
    ("batch_matmul", "llvm", False): CPU_MATMUL,
    ("conv2d", "llvm", False): CPU_CONV2D,
    ("group_conv2d", "llvm", False): CPU_CONV2D,
    ("depthwise_conv2d", "llvm", False): ScheduleTemplate(
        "cpu_depthwise", "cpu_depthwise", cpu_depthwise.space, cpu_depthwise.schedule),
    ("max_pool2d", "llvm", False): CPU_POOL,
    ("avg_pool2d", "llvm", False): CPU_POOL,
    ("global_avg_pool2d", "llvm", False): CPU_CHANNELWISE,
    ("channel_mul", "llvm", False): CPU_CHANNELWISE,
    ("channel_affine", "llvm", False): CPU_CHANNELWISE,
    ("channel_shuffle", "llvm", False): CPU_SHUFFLE,
    ("matmul", "cuda", False): CUDA_MATMUL,
    ("batch_matmul", "cuda", False): CUDA_MATMUL,
    ("conv2d", "cuda", False): CUDA_CONV2D,
    ("group_conv2d", "cuda", False): CUDA_CONV2D,
    ("depthwise_conv2d", "cuda", False): CUDA_DEPTHWISE,
    # half-precision workloads run on the tensor cores
    ("matmul", "cuda", True): TENSORCORE,
    ("batch_matmul", "cuda", True): TENSORCORE,
    ("conv2d", "cuda", True): TENSORCORE,
    ("depthwise_conv2d", "cuda", True): CUDA_DEPTHWISE,
})


def get_template(op: str, target_kind: str, dtype: str = "float32") -> Template:
    """The registry's template for ``op`` on targets of ``target_kind`` with ``dtype`` data
    (before the variants `template_for` picks)."""
    template = _TEMPLATES.get((op, target_kind, dtype in HALF_DTYPES))
    if template is None:
        raise ValueError(f"no schedule template for op {op!r} on target kind {target_kind!r}"
                         + (f" with dtype {dtype!r}" if dtype != "float32" else ""))
    return template


def template_for(workload: Workload, target: Target) -> Template:
    """The template of ``workload`` on ``target``: `get_template`'s, or the variant its
    shape, layout or target takes (see the module's docstring)."""
    if target.kind == "cuda" and target.arch == "sm_90a" and workload.dtype in HALF_DTYPES \
            and cuda_wgmma.workload_reason(workload) is None:
        return WGMMA
    if target.kind == "llvm" and cpu_gemv.is_gemv(workload):
        return GEMV
    if target.kind == "llvm" and workload.op in ("conv2d", "group_conv2d") \
            and workload.block > 1:
        return CONV2D_BLOCKED  # channel-blocked data and output
    if target.kind == "llvm" and workload.op in WINDOW_BLOCKED and workload.block > 1:
        return WINDOW_BLOCKED[workload.op]
    return get_template(workload.op, target.kind, workload.dtype)
