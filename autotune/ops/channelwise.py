"""Per-channel ops of NCHW data: the global average pool and a gate multiplying every
channel of every image by a value of its own (squeeze-and-excitation's two ends), and a
per-channel affine map (a batch norm that follows no conv to fold into: DenseNet's).

``global_avg_pool2d``: out[N, C, 1, 1] = the mean of data[N, C, H, W] over H and W (torch's
``adaptive_avg_pool2d(x, 1)``, ``x.mean((2, 3))``). ``channel_mul``: out[N, C, H, W] =
data[N, C, H, W] * gate[N, C, 1, 1] (``gate * x`` with broadcasting). ``channel_affine``:
out[N, C, H, W] = data[N, C, H, W] * factor[C] + offset[C], then its epilogue (an inference
batch norm and the activation after it; named apart from the epilogue's scale and
shift). All take blocked layouts (`autotune.ops.layout`): a pooled tensor of 1 x 1 pixels
is laid out alike in NCHW and NCHW[x]c, so a blocked pool's output is also its NCHW one.
"""
from __future__ import annotations

import numpy as np

from autotune.ops.conv2d import BATCH, CHANNELS, HEIGHT, WIDTH
from autotune.ops.spec import OpSpec, Params, Shape, sizes


def _data(params: Params) -> Shape:
    return sizes(params, "NCHW")


def _pooled(params: Params) -> Shape:
    n, c = sizes(params, "NC")
    return (n, c, 1, 1)


def _channels(params: Params) -> Shape:
    return sizes(params, "C")


def _elements(params: Params) -> int:
    return int(np.prod(_data(params)))


def _mean(params: Params, data: np.ndarray) -> np.ndarray:
    return data.mean(axis=(2, 3), keepdims=True)


def _gate(params: Params, data: np.ndarray, gate: np.ndarray) -> np.ndarray:
    return data * gate


def _affine(params: Params, data: np.ndarray, factor: np.ndarray, offset: np.ndarray
            ) -> np.ndarray:
    return data * factor[:, None, None] + offset[:, None, None]


GLOBAL_AVG_POOL2D = OpSpec(
    name="global_avg_pool2d",
    doc="out[N,C,1,1] = mean of data[N,C,H,W] over H and W; 1 flop per input element",
    params=(BATCH, CHANNELS, HEIGHT, WIDTH),
    channel_axis=1,
    inputs=lambda params: (("data", _data(params)),),
    output_shape=_pooled,
    macs=_elements,
    compute=_mean,
    flops_per_mac=1,
    epilogue=False,
    targets=("llvm",),
)

CHANNEL_MUL = OpSpec(
    name="channel_mul",
    doc="out[N,C,H,W] = data[N,C,H,W] * gate[N,C,1,1] (a gate per image and channel); "
        "1 flop per output element",
    params=(BATCH, CHANNELS, HEIGHT, WIDTH),
    channel_axis=1,
    inputs=lambda params: (("data", _data(params)), ("gate", _pooled(params))),
    output_shape=_data,
    macs=_elements,
    compute=_gate,
    flops_per_mac=1,
    epilogue=False,
    targets=("llvm",),
)


CHANNEL_AFFINE = OpSpec(
    name="channel_affine",
    doc="out[N,C,H,W] = data[N,C,H,W] * factor[C] + offset[C] (an inference batch norm), "
        "then the epilogue; 2 flops per output element",
    params=(BATCH, CHANNELS, HEIGHT, WIDTH),
    channel_axis=1,
    inputs=lambda params: (("data", _data(params)), ("factor", _channels(params)),
                           ("offset", _channels(params))),
    output_shape=_data,
    macs=_elements,
    compute=_affine,
    flops_per_mac=2,
    targets=("llvm",),
)
