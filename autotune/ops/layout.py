"""Data layouts of conv2d: plain NCHW, NCHW[x]c (channels blocked by x), or NHWC.

In NCHW[x]c (oneDNN's nChw16c for x = 16) data is [N, C/x, H, W, x] and the output
[N, K/x, OH, OW, x]: a vector of x channels is contiguous, so a kernel vectorised along
channels reads and writes whole vectors, and consecutive blocked layers need no transform.
The weight stays KCRS (a kernel packs it); per-channel epilogue vectors stay (K,).

NHWC (channels last, torch's ``channels_last``) has data [N, H, W, C], weight [K, R, S, C]
and output and residual [N, OH, OW, K]: every operand's rows are runs of channels, which
TMA copies as tiles of an implicit GEMM (the Hopper wgmma kernels; CUDA only).
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

NCHW = "NCHW"
NHWC = "NHWC"
# op -> the channel counts a block must divide (data's, output's)
LAYOUT_OPS: dict[str, tuple[str, str]] = {"conv2d": ("C", "K")}
MAX_BLOCK = 64  # channels per block: a few AVX-512 vectors at most
_BLOCKED = re.compile(r"NCHW([1-9][0-9]?)c")


def blocked(block: int) -> str:
    """The layout name of channels blocked by ``block``: ``NCHW16c``."""
    return f"NCHW{block}c"


def layout_block(layout: str) -> int:
    """Channels per block of ``layout`` (1 for NCHW and NHWC); ValueError for an unknown
    layout."""
    if layout in (NCHW, NHWC):
        return 1
    found = _BLOCKED.fullmatch(layout) if isinstance(layout, str) else None
    if found is None or not 2 <= int(found.group(1)) <= MAX_BLOCK:
        raise ValueError(f"workload: unknown layout {layout!r}; expected NCHW, NHWC or "
                         f"NCHW<x>c with 2 <= x <= {MAX_BLOCK} (NCHW16c)")
    return int(found.group(1))


def layout_refusal(op: str, layout: str, params: Mapping[str, Any]
                   ) -> tuple[str, str] | None:
    """(the parameter at fault, why) when ``op`` with ``params`` cannot take ``layout``
    (a blocked layout of an op without one, or a channel count that is not a multiple of
    the block; ``""`` for the layout itself), else None. An unknown layout: ValueError."""
    block = layout_block(layout)
    if layout == NHWC and op not in LAYOUT_OPS:
        return "", f"{op}: has no NHWC layout; only {', '.join(sorted(LAYOUT_OPS))} takes one"
    if block == 1:
        return None
    if op not in LAYOUT_OPS:
        return "", (f"{op}: has no blocked layout; only {', '.join(sorted(LAYOUT_OPS))} "
                    f"takes one")
    for name in LAYOUT_OPS[op]:
        size = int(params[name])
        if size % block:
            return name, (f"{op}: layout {layout} needs {name}={size} to be a multiple of "
                          f"{block}")
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


# NHWC: which arguments are activations ([N, C, H, W] in NCHW) and which the weight
_ACTIVATIONS = ("data", "residual", "out")


def layout_shape(name: str, shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """Argument ``name``'s shape in ``layout``, from its NCHW (KCRS) ``shape``: activations
    move, the weight too in NHWC (KRSC), per-channel vectors never."""
    if layout == NHWC and name in (*_ACTIVATIONS, "weight"):
        n, c, h, w = shape
        return (n, h, w, c)
    return blocked_shape(shape, layout_block(layout)) if name in _ACTIVATIONS else shape


def to_layout(array: np.ndarray, name: str, layout: str) -> np.ndarray:
    """Argument ``name``'s NCHW (KCRS) array in ``layout`` (a contiguous copy, or itself)."""
    if layout == NHWC and name in (*_ACTIVATIONS, "weight"):
        return np.ascontiguousarray(array.transpose(0, 2, 3, 1))
    return to_blocked(array, layout_block(layout)) if name in _ACTIVATIONS else array


def from_layout(array: np.ndarray, name: str, layout: str) -> np.ndarray:
    """`to_layout` undone: argument ``name`` back in NCHW (KCRS)."""
    if layout == NHWC and name in (*_ACTIVATIONS, "weight"):
        return np.ascontiguousarray(array.transpose(0, 3, 1, 2))
    if layout_block(layout) > 1 and name in _ACTIVATIONS:
        return from_blocked(array)
    return array
