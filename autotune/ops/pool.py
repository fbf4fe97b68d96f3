"""2-D max pooling over NCHW data: each output is the largest input in its R x S window.

Torch's ``max_pool2d`` without dilation or indices: padded cells hold -inf, so they never
win, and the padding is at most half the window (as torch requires). With ``ceil_mode`` the
output size is rounded up, as torch's: the last window may run past the bottom or right
edge (into -inf padding there, `end_pad`) but starts inside the data or its top/left
padding.
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


def _check(params: Params) -> None:
    if params.get("ceil_mode", 0) not in (0, 1):
        raise ParamError(f"max_pool2d: parameter 'ceil_mode'={params['ceil_mode']} must be "
                         f"0 or 1", "ceil_mode")
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
