"""Data layouts of the conv and pool ops: plain NCHW, NCHW[x]c (channels blocked by x), a
conv2d's data and output in two of those, or NHWC.

In NCHW[x]c (oneDNN's nChw16c for x = 16) data is [N, C/x, H, W, x] and the output
[N, K/x, OH, OW, x]: a vector of x channels is contiguous, so a kernel vectorised along
channels reads and writes whole vectors, and consecutive blocked layers need no transform.
conv2d, depthwise_conv2d (multiplier 1), max_pool2d, avg_pool2d and the channelwise ops
(`autotune.ops.channelwise`: a channel_mul's gate is blocked too) take it. The weight stays KCRS (a
kernel packs it); per-channel epilogue vectors stay (K,). A conv2d may read one and write
another, ``IN>OUT`` (TVM's conv2d_NCHWc with its ``out_layout``): ``NCHW>NCHW16c`` is a
model's first conv reading the image as given and writing blocked channels, and
``NCHW16c>NCHW8c`` moves a model to channel counts that 16 does not divide (the residual
is in the output's layout).

NHWC (channels last, torch's ``channels_last``) has data [N, H, W, C], weight [K, R, S, C]
and output and residual [N, OH, OW, K]: every operand's rows are runs of channels, which
TMA copies as tiles of an implicit GEMM (the Hopper wgmma kernels; CUDA only).
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

from autotune.ops.shuffle import PARTS

NCHW = "NCHW"
NHWC = "NHWC"
# op -> the channel counts a block must divide (data's, output's)
LAYOUT_OPS: dict[str, tuple[str, str]] = {"conv2d": ("C", "K"), "group_conv2d": ("C", "K"),
                                          "depthwise_conv2d": ("C", "C"),
                                          "max_pool2d": ("C", "C"),
                                          "avg_pool2d": ("C", "C"),
                                          "global_avg_pool2d": ("C", "C"),
                                          "channel_mul": ("C", "C"),
                                          "channel_affine": ("C", "C"),
                                          "channel_shuffle": ("C", "C")}
NHWC_OPS = ("conv2d",)
# ops whose data and output may be in different layouts
MIXED_OPS = ("conv2d", "group_conv2d")
MAX_BLOCK = 64  # channels per block: a few AVX-512 vectors at most
_BLOCKED = re.compile(r"NCHW([1-9][0-9]?)c")
_MIXED = ">"  # IN>OUT


def blocked(block: int) -> str:
    """The layout name of channels blocked by ``block``: ``NCHW16c``."""
    return f"NCHW{block}c"


def mixed(in_block: int, out_block: int) -> str:
    """The layout of a conv2d reading NCHW[in_block]c and writing NCHW[out_block]c (block 1:
    NCHW), e.g. ``NCHW>NCHW16c``; one name when they agree."""
    def name(block: int) -> str:
        return NCHW if block == 1 else blocked(block)
    return name(out_block) if in_block == out_block else \
        f"{name(in_block)}{_MIXED}{name(out_block)}"


def layout_blocks(layout: str) -> tuple[int, int]:
    """Channels per block of ``layout``'s data and output (1 for NCHW and NHWC);
    ValueError for an unknown layout."""
    if isinstance(layout, str) and layout.count(_MIXED) == 1:
        first, second = layout.split(_MIXED)
        if NHWC not in (first, second):
            ins, outs = _single_block(first, layout), _single_block(second, layout)
            if ins != outs:
                return ins, outs
    block = _single_block(layout, layout)
    return block, block


def layout_block(layout: str) -> int:
    """Channels per block of ``layout``'s output (1 for NCHW and NHWC); ValueError for an
    unknown layout."""
    return layout_blocks(layout)[1]


def _single_block(name: str, layout: str) -> int:
    if name in (NCHW, NHWC):
        return 1
    found = _BLOCKED.fullmatch(name) if isinstance(name, str) else None
    if found is None or not 2 <= int(found.group(1)) <= MAX_BLOCK:
        raise ValueError(f"workload: unknown layout {layout!r}; expected NCHW, NHWC, "
                         f"NCHW<x>c with 2 <= x <= {MAX_BLOCK} (NCHW16c), or a conv2d's "
                         f"data and output layouts, different, as IN>OUT (NCHW>NCHW16c)")
    return int(found.group(1))


def layout_refusal(op: str, layout: str, params: Mapping[str, Any]
                   ) -> tuple[str, str] | None:
    """(the parameter at fault, why) when ``op`` with ``params`` cannot take ``layout``
    (a blocked layout of an op without one, or a channel count that is not a multiple of
    the block; ``""`` for the layout itself), else None. An unknown layout: ValueError."""
    blocks = layout_blocks(layout)
    if layout == NHWC and op not in NHWC_OPS:
        return "", f"{op}: has no NHWC layout; only {', '.join(NHWC_OPS)} takes one"
    if blocks == (1, 1):
        return None
    if op not in LAYOUT_OPS:
        return "", (f"{op}: has no blocked layout; only {', '.join(sorted(LAYOUT_OPS))} "
                    f"take one")
    if blocks[0] != blocks[1] and op not in MIXED_OPS:
        return "", (f"{op}: reads and writes one layout; only {' and '.join(MIXED_OPS)} "
                    f"take two ({layout})")
    if blocks[1] == 1:
        return "", (f"{op}: {layout}: blocked data is written blocked (its kernels store "
                    f"vectors of output channels); NCHW output comes from NCHW data")
    if op == "depthwise_conv2d" and int(params["multiplier"]) != 1:
        return "multiplier", (f"{op}: layout {layout} needs multiplier=1 (an output channel "
                              f"reads its own input channel's lane)")
    for name, block in zip(LAYOUT_OPS[op], blocks):
        size = int(params[name])
        if size % block:
            return name, (f"{op}: layout {layout} needs {name}={size} to be a multiple of "
                          f"{block}")
        groups = int(params.get("groups", 1))
        if (size // groups) % block:  # a block holds channels of one group
            return "groups", (f"{op}: layout {layout} needs {name}/groups={size // groups} "
                              f"to be a multiple of {block}")
    return None


def blocked_shape(shape: tuple[int, ...], block: int) -> tuple[int, ...]:
    """An NCHW shape in NCHW[block]c (itself for block 1)."""
    if block == 1:
        return shape
    n, c, h, w = shape
    return (n, c // block, h, w, block)


def to_blocked(array: np.ndarray, block: int) -> np.ndarray:
    """An NCHW array in NCHW[block]c (a contiguous copy; the array itself for block 1)."""
    if block == 1:
        return array
    n, c, h, w = array.shape
    return np.ascontiguousarray(array.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def from_blocked(array: np.ndarray) -> np.ndarray:
    """An NCHW[x]c array (5-D) in NCHW (a contiguous copy)."""
    n, co, h, w, ci = array.shape
    return np.ascontiguousarray(array.transpose(0, 1, 4, 2, 3).reshape(n, co * ci, h, w))


# which arguments are activations ([N, C, H, W] in NCHW; all but the data in the output's
# block); NHWC moves these and the weight
_ACTIVATIONS = ("data", "residual", "gate", "out", *PARTS)


def arg_block(name: str, layout: str) -> int:
    """Channels per block of argument ``name`` in ``layout``: the data's block for the data,
    the output's for the output and a residual, 1 for weights and vectors."""
    if name not in _ACTIVATIONS:
        return 1
    ins, outs = layout_blocks(layout)
    return ins if name == "data" else outs


def layout_shape(name: str, shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Argument ``name``'s shape in ``layout``, from its NCHW (KCRS) ``shape``: activations
    move, the weight too in NHWC (KRSC), per-channel vectors never."""
    if layout == NHWC and name in (*_ACTIVATIONS, "weight"):
        n, c, h, w = shape
        return (n, h, w, c)
    return blocked_shape(shape, arg_block(name, layout))


def to_layout(array: np.ndarray, name: str, layout: str) -> np.ndarray:
    """Argument ``name``'s NCHW (KCRS) array in ``layout`` (a contiguous copy, or itself)."""
    if layout == NHWC and name in (*_ACTIVATIONS, "weight"):
        return np.ascontiguousarray(array.transpose(0, 2, 3, 1))
    return to_blocked(array, arg_block(name, layout))


def from_layout(array: np.ndarray, name: str, layout: str) -> np.ndarray:
    """`to_layout` undone: argument ``name`` back in NCHW (KCRS)."""
    if layout == NHWC and name in (*_ACTIVATIONS, "weight"):
        return np.ascontiguousarray(array.transpose(0, 3, 1, 2))
    if arg_block(name, layout) > 1:
        return from_blocked(array)
    return array
