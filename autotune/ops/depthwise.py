"""Depthwise 2-D convolution: each input channel gets `multiplier` filters of its own."""
from __future__ import annotations

import numpy as np

from autotune.ops.conv2d import (
    BATCH,
    CHANNELS,
    HEIGHT,
    KERNEL_H,
    KERNEL_W,
    PAD,
    STRIDE,
    WIDTH,
    check_kernel_fits,
    out_hw,
    windows,
)
from autotune.ops.spec import OpSpec, Params, ParamSpec, Shape, sizes

_NO_DILATION = (1, 1)


def _check(params: Params) -> None:
    check_kernel_fits("depthwise_conv2d", params, _NO_DILATION)


def _out_channels(params: Params) -> int:
    c, mult = sizes(params, ("C", "multiplier"))
    return c * mult


def _inputs(params: Params) -> tuple[tuple[str, Shape], ...]:
    n, c, h, w, r, s = sizes(params, "NCHWRS")
    return (("data", (n, c, h, w)), ("weight", (_out_channels(params), 1, r, s)))


def _output_shape(params: Params) -> Shape:
    (n,) = sizes(params, "N")
    return (n, _out_channels(params), *out_hw(params, _NO_DILATION))


def _macs(params: Params) -> int:
    n, o, oh, ow = _output_shape(params)
    r, s = sizes(params, "RS")
    return n * o * oh * ow * r * s


def _compute(params: Params, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    mult = int(params["multiplier"])  # type: ignore[arg-type]
    # Output channel o reads input channel o // multiplier: repeat channels to line up.
    if mult > 1:
        data = np.repeat(data, mult, axis=1)
    acc: np.ndarray = np.zeros(_output_shape(params), dtype=np.float64)
    for r, s, view in windows(data, params, _NO_DILATION):
        acc += view * weight[:, 0, r, s][None, :, None, None]
    return acc


DEPTHWISE_CONV2D = OpSpec(
    name="depthwise_conv2d",
    doc="out[N,C*m,OH,OW]: channel o convolves data channel o//m with weight[o,0,R,S]",
    params=(
        BATCH,
        CHANNELS,
        HEIGHT,
        WIDTH,
        KERNEL_H,
        KERNEL_W,
        STRIDE,
        PAD,
        ParamSpec("multiplier", "filters per input channel", default=1),
    ),
    channel_axis=1,
    inputs=_inputs,
    output_shape=_output_shape,
    macs=_macs,
    compute=_compute,
    check=_check,
)
