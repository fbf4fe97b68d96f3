"""2-D convolution, NCHW data and KCRS weights, with stride, padding and dilation."""
from __future__ import annotations

from typing import Iterator

import numpy as np

from autotune.ops.spec import OpSpec, ParamError, Params, ParamSpec, Shape, pair, sizes

# Params shared with depthwise_conv2d.
BATCH = ParamSpec("N", "batch size")
CHANNELS = ParamSpec("C", "input channels")
HEIGHT = ParamSpec("H", "input height")
WIDTH = ParamSpec("W", "input width")
KERNEL_H = ParamSpec("R", "kernel height")
KERNEL_W = ParamSpec("S", "kernel width")
STRIDE = ParamSpec("stride", "stride (h, w); an int means both", pair=True)
PAD = ParamSpec("pad", "zero padding on each side (h, w); an int means both", pair=True, minimum=0)


def conv_out_size(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    """Output extent of one spatial axis."""
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def check_kernel_fits(op: str, params: Params, dilation: tuple[int, int]) -> None:
    """Raise a `ParamError` at R or S when the (dilated) kernel exceeds the padded input."""
    for size_name, kernel_name, axis, word in (("H", "R", 0, "height"), ("W", "S", 1, "width")):
        size, kernel = sizes(params, (size_name, kernel_name))
        padded = size + 2 * pair(params, "pad")[axis]
        extent = dilation[axis] * (kernel - 1) + 1
        if extent <= padded:
            continue
        spans = "" if dilation[axis] == 1 else f" with dilation {dilation[axis]} spans {extent} and"
        raise ParamError(
            f"{op}: parameter {kernel_name!r}={kernel}{spans} is larger than the padded input "
            f"{word} {padded} ({size_name} + 2*pad)", kernel_name
        )


def out_hw(params: Params, dilation: tuple[int, int]) -> tuple[int, int]:
    """(OH, OW) of a conv-like op."""
    h, w, r, s = sizes(params, "HWRS")
    (sh, sw), (ph, pw) = pair(params, "stride"), pair(params, "pad")
    return conv_out_size(h, r, sh, ph, dilation[0]), conv_out_size(w, s, sw, pw, dilation[1])


def windows(
    data: np.ndarray, params: Params, dilation: tuple[int, int], fill: float = 0.0
) -> Iterator[tuple[int, int, np.ndarray]]:
    """Yield (r, s, view): the input padded with ``fill`` sampled at kernel tap (r, s), shape
    (N,C,OH,OW)."""
    r_taps, s_taps = sizes(params, "RS")
    (sh, sw), (ph, pw) = pair(params, "stride"), pair(params, "pad")
    oh, ow = out_hw(params, dilation)
    padded = np.pad(data, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    for r in range(r_taps):
        top = r * dilation[0]
        for s in range(s_taps):
            left = s * dilation[1]
            rows = slice(top, top + sh * (oh - 1) + 1, sh)
            yield r, s, padded[:, :, rows, slice(left, left + sw * (ow - 1) + 1, sw)]


def _dilation(params: Params) -> tuple[int, int]:
    return pair(params, "dilation")


def _check(params: Params) -> None:
    check_kernel_fits("conv2d", params, _dilation(params))


def _inputs(params: Params) -> tuple[tuple[str, Shape], ...]:
    n, c, h, w, k, r, s = sizes(params, "NCHWKRS")
    return (("data", (n, c, h, w)), ("weight", (k, c, r, s)))


def _output_shape(params: Params) -> Shape:
    n, k = sizes(params, "NK")
    return (n, k, *out_hw(params, _dilation(params)))


def _macs(params: Params) -> int:
    # Taps landing in the padding count too: that is what a dense kernel computes.
    n, k, oh, ow = _output_shape(params)
    c, r, s = sizes(params, "CRS")
    return n * k * oh * ow * c * r * s


def _compute(params: Params, data: np.ndarray, weight: np.ndarray) -> np.ndarray:
    n, k, oh, ow = _output_shape(params)
    # One (N*OH*OW, C) @ (C, K) product per kernel tap keeps memory at one tap's window.
    acc: np.ndarray = np.zeros((n * oh * ow, k), dtype=np.float64)
    for r, s, view in windows(data, params, _dilation(params)):
        rows = view.transpose(0, 2, 3, 1).reshape(n * oh * ow, -1)
        acc += rows @ weight[:, :, r, s].T
    return acc.reshape(n, oh, ow, k).transpose(0, 3, 1, 2)


CONV2D = OpSpec(
    name="conv2d",
    doc="out[N,K,OH,OW] = conv(data[N,C,H,W], weight[K,C,R,S])",
    params=(
        BATCH,
        CHANNELS,
        HEIGHT,
        WIDTH,
        ParamSpec("K", "output channels"),
        KERNEL_H,
        KERNEL_W,
        STRIDE,
        PAD,
        ParamSpec("dilation", "kernel dilation (h, w); an int means both", default=1, pair=True),
    ),
    channel_axis=1,
    inputs=_inputs,
    output_shape=_output_shape,
    macs=_macs,
    compute=_compute,
    check=_check,
)
