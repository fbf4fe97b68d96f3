"""2-D max and average pooling over NCHW data: each output is the largest input in its
R x S window, or the window's mean.

max_pool2d is torch's ``max_pool2d`` without dilation or indices: padded cells hold -inf,
so they never win, and the padding is at most half the window (as torch requires). With
``ceil_mode`` the output size is rounded up, as torch's: the last window may run past the
bottom or right edge (into -inf padding there, `end_pad`) but starts inside the data or
its top/left padding.

avg_pool2d is torch's ``avg_pool2d`` with ``count_include_pad`` (its default): padded cells
hold 0 and count, so every window's sum is divided by R*S (Inception's 3x3 stride-1
branch pools, DenseNet's 2x2 transitions). Without padding that is also
``count_include_pad=False``.
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


CEIL_MODE = ParamSpec("ceil_mode", "1: the output size rounded up (torch's ceil_mode), the "
                      "last windows running past the bottom and right edges; 0: rounded down",
                      default=0, minimum=0, keyless_default=True)


def pool_out_hw(params: Params) -> tuple[int, int]:
    """(OH, OW): a conv's, or rounded up with ``ceil_mode``."""
    if not params.get("ceil_mode"):
        return out_hw(params, _NO_DILATION)
    (h, w, r, s), (sh, sw), (ph, pw) = sizes(params, "HWRS"), pair(params, "stride"), \
        pair(params, "pad")
    return _ceil_size(h, r, sh, ph), _ceil_size(w, s, sw, pw)


def _ceil_size(size: int, window: int, stride: int, pad: int) -> int:
    out = -(-(size + 2 * pad - window) // stride) + 1
    # torch: the last window starts inside the data or the padding before it
    return out - 1 if (out - 1) * stride >= size + pad else out


def end_pad(params: Params) -> tuple[int, int]:
    """The -inf padding past the bottom and right edges beyond ``pad`` that the last
    windows read (0 without ``ceil_mode``)."""
    (h, w, r, s), (sh, sw), (ph, pw) = sizes(params, "HWRS"), pair(params, "stride"), \
        pair(params, "pad")
    oh, ow = pool_out_hw(params)
    return max(0, (oh - 1) * sh + r - h - 2 * ph), max(0, (ow - 1) * sw + s - w - 2 * pw)


def _check(params: Params, op: str = "max_pool2d") -> None:
    if params.get("ceil_mode", 0) not in (0, 1):
        raise ParamError(f"{op}: parameter 'ceil_mode'={params['ceil_mode']} must be "
                         f"0 or 1", "ceil_mode")
    check_kernel_fits(op, params, _NO_DILATION)
    for axis, (name, word) in enumerate((("R", "height"), ("S", "width"))):
        (window,), pad = sizes(params, name), pair(params, "pad")[axis]
        if 2 * pad > window:  # a window could then lie wholly in the padding
            raise ParamError(f"{op}: parameter 'pad'={pad} exceeds half the window "
                             f"{word} {name}={window}", "pad")


def _inputs(params: Params) -> tuple[tuple[str, Shape], ...]:
    n, c, h, w = sizes(params, "NCHW")
    return (("data", (n, c, h, w)),)


def _output_shape(params: Params) -> Shape:
    n, c = sizes(params, "NC")
    return (n, c, *pool_out_hw(params))


def _comparisons(params: Params) -> int:
    # One comparison per window element (padding included), like a conv's multiply-adds.
    n, c, oh, ow = _output_shape(params)
    r, s = sizes(params, "RS")
    return n * c * oh * ow * r * s


def _compute(params: Params, data: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.full(_output_shape(params), -np.inf)
    eh, ew = end_pad(params)
    padded = np.pad(data, ((0, 0), (0, 0), (0, eh), (0, ew)), constant_values=-np.inf)
    # windows pads ``pad`` on every side itself; the extra end padding goes in first
    for _, _, view in windows(padded, {**params, "H": data.shape[2] + eh,
                                       "W": data.shape[3] + ew, "ceil_mode": 0},
                              _NO_DILATION, fill=-np.inf):
        np.maximum(out, view, out=out)
    return out


MAX_POOL2D = OpSpec(
    name="max_pool2d",
    doc="out[N,C,OH,OW] = max of data[N,C,H,W] over each R x S window (-inf padding); "
        "1 flop per window element",
    params=(BATCH, CHANNELS, HEIGHT, WIDTH, KERNEL_H, KERNEL_W, STRIDE, PAD, CEIL_MODE),
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


ZERO_PAD = ParamSpec("pad", "zero padding on each side (h, w), at most half the window, "
                     "counted in every window's R*S divisor (torch's count_include_pad); an "
                     "int means both", pair=True, minimum=0)


def _check_avg(params: Params) -> None:
    _check(params, "avg_pool2d")


def _mean(params: Params, data: np.ndarray) -> np.ndarray:
    out: np.ndarray = np.zeros(_output_shape(params))
    for _, _, view in windows(data, params, _NO_DILATION, fill=0.0):
        out += view
    r, s = sizes(params, "RS")
    return out / (r * s)


AVG_POOL2D = OpSpec(
    name="avg_pool2d",
    doc="out[N,C,OH,OW] = sum of data[N,C,H,W] over each R x S window (zero padding, "
        "counted) / (R*S); 1 flop per window element",
    params=(BATCH, CHANNELS, HEIGHT, WIDTH, KERNEL_H, KERNEL_W, STRIDE, ZERO_PAD),
    channel_axis=1,
    inputs=_inputs,
    output_shape=_output_shape,
    macs=_comparisons,
    compute=_mean,
    check=_check_avg,
    flops_per_mac=1,
    epilogue=False,
    targets=("llvm",),
)
