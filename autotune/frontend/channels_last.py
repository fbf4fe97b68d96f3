"""Channels-last convs on a CUDA target (`compile_model(layout="auto")` on cuda).

On Hopper (`cuda -arch=sm_90a`) a half conv runs on the wgmma kernels when its workload is
in the NHWC layout (`autotune.ops.layout`): the kernels copy rows of channels with TMA.
torch's ``channels_last`` tensors are that layout with NCHW shapes, so such a conv reads its
input and residual and writes its output as channels_last tensors, and a chain of them (or
a channels_last model) passes its activations on without a copy; elsewhere torch converts
at the first NHWC conv (`CudaKernelModule`), once.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from autotune.frontend.tasks import Match
from autotune.ops import Workload, WorkloadError
from autotune.ops.layout import NHWC
from autotune.schedule.templates import WGMMA, template_for
from autotune.target import Target


def nhwc_form(wl: Workload, target: Target) -> Workload | None:
    """``wl`` in NHWC where ``target``'s wgmma kernels run that form, else None."""
    if wl.op != "conv2d" or target.kind != "cuda" or wl.prepacked:
        return None
    try:
        form = replace(wl, layout=NHWC)
    except (ValueError, WorkloadError):
        return None
    return form if template_for(form, target) is WGMMA else None


def channels_last(matches: Sequence[Match], target: Target) -> list[Match]:
    """``matches`` with each conv the wgmma kernels can run in NHWC in that layout."""
    out = []
    for m in matches:
        form = nhwc_form(m.workload, target)
        out.append(m if form is None else replace(m, workload=form))
    return out
