"""2-D max pooling over NCHW data: each output is the largest input in its R x S window.

Torch's ``max_pool2d`` without dilation, ``ceil_mode`` or indices: padded cells hold -inf,
so they never win, and the padding is at most half the window (as torch requires).
"""
from __future__ import annotations

import numpy as np

from autotune.ops.conv2d import (
    BATCH,
    CHANNELS,
    HEIGHT,
    KERNEL_H,
    KERNEL_W,
    STRIDE,
    WIDTH,
    check_kernel_fits,
    out_hw,
    windows,
)
from autotune.ops.spec import OpSpec, ParamError, Params, ParamSpec, Shape, pair, sizes

_NO_DILATION = (1, 1)
PAD = ParamSpec("pad", "-inf padding on each side (h, w), at most half the window; an int "
                "means both", pair=True, minimum=0)


def _check(params: Params) -> None:
    check_kernel_fits("max_pool2d", params, _NO_DILATION)
    for axis, (name, word) in enumerate((("R", "height"), ("S", "width"))):
        (window,), pad = sizes(params, name), pair(params, "pad")[axis]
        if 2 * pad > window:  # a window could then lie wholly in the padding
            raise ParamError(f"max_pool2d: parameter 'pad'={pad} exceeds half the window "
                             f"{word} {name}={window}", "pad")


def _inputs(params: Params) -> tuple[tuple[str, Shape], ...]:
    n, c, h, w = sizes(params, "NCHW")
    return (("data", (n, c, h, w)),)


def _output_shape(params: Params) -> Shape:
    n, c = sizes(params, "NC")
    return (n, c, *out_hw(params, _NO_DILATION))


def _comparisons(params: Params) -> int:
    # One comparison per window element (padding included), like a conv's multiply-adds.
    n, c, oh, ow = _output_shape(params)
    r, s = sizes(params, "RS")
    return n * c * oh * ow * r * s


def _compute(params: Params, data: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.full(_output_shape(params), -np.inf)
    for _, _, view in windows(data, params, _NO_DILATION, fill=-np.inf):
        np.maximum(out, view, out=out)
    return out


MAX_POOL2D = OpSpec(
    name="max_pool2d",
    doc="out[N,C,OH,OW] = max of data[N,C,H,W] over each R x S window (-inf padding); "
        "1 flop per window element",
    params=(BATCH, CHANNELS, HEIGHT, WIDTH, KERNEL_H, KERNEL_W, STRIDE, PAD),
    channel_axis=1,
    inputs=_inputs,
    output_shape=_output_shape,
    macs=_comparisons,
    compute=_compute,
    check=_check,
    flops_per_mac=1,
    epilogue=False,
    targets=("llvm",),
)
