"""Where the Hopper statements put and find data, as the hardware computes it: the TMA box
and its swizzled shared-memory layout, wgmma's matrix descriptors, and the wgmma
accumulator fragment. Pure functions of numpy arrays, for the execution model
(``simulate_hopper``).

Addresses are bytes of shared memory. A swizzle of S bytes (32, 64 or 128) XORs the
16-byte chunk bits [4, 4 + b) of an address with its bits [7, 7 + b), b = log2(S / 16): the
pattern repeats every 8 rows of 128 bytes, so a tile that starts 1024-byte aligned has the
same layout wherever it lies.
"""
from __future__ import annotations

from functools import lru_cache
from math import prod

import numpy as np

from autotune.ir.stmt import WARPGROUP, wgmma_fragment

ROW_BYTES = 128          # one row of a swizzle pattern
PATTERN_BYTES = 1024     # 8 rows: the period of every swizzle
WGMMA_M, WGMMA_K = 64, 16


def swizzle(addr: np.ndarray, size: int) -> np.ndarray:
    """The physical address of each logical byte address in ``addr`` under a ``size``-byte
    swizzle (0: none)."""
    if not size:
        return addr
    bits = {32: 1, 64: 2, 128: 3}[size]
    return addr ^ (((addr >> 7) & ((1 << bits) - 1)) << 4)


def box_elements(shape: tuple[int, ...], box: tuple[int, ...], coords: np.ndarray,
                 steps: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """For copies of ``box`` elements (per dimension: what a copy brings) from a row-major
    tensor of ``shape`` at ``coords`` (copies x dims, outermost first), taking every
    ``steps[d]``-th element along dimension d (a tensor map's traversal strides): each box
    element's flat index in the tensor and whether it lies inside it (copies x box
    elements, the box row-major). Elements outside read as zero."""
    grids = np.indices(box).reshape(len(box), -1)                  # dims x box elements
    if steps is not None:
        grids = grids * np.asarray(steps)[:, None]
    at = coords[:, :, None] + grids[None, :, :]                    # copies x dims x elems
    dims = np.asarray(shape)[None, :, None]
    inside = ((at >= 0) & (at < dims)).all(axis=1)
    strides = np.array([prod(shape[d + 1:]) for d in range(len(shape))])
    flat = (np.where(at >= 0, at, 0) * strides[None, :, None]).sum(axis=1)
    return flat, inside


@lru_cache(maxsize=64)
def descriptor_offsets(major: str, rows: int, cols: int, lbo: int, sbo: int, item: int,
                       row_bytes: int = ROW_BYTES) -> np.ndarray:
    """Byte offsets from a descriptor's start, before the swizzle, of the (rows x cols)
    operand it describes, row-major. K-major ("k": K contiguous; rows are M or N, cols K):
    element (r, k) at (r // 8) * sbo + (r % 8) * row + k * item. MN-major ("mn": rows are
    K, cols M or N contiguous): element (k, n) at (n // per_row) * lbo + (k // 8) * sbo +
    (k % 8) * row + (n % per_row) * item, per_row = row / item."""
    r, c = np.divmod(np.arange(rows * cols, dtype=np.int64), cols)
    if major == "k":
        out = r // 8 * sbo + r % 8 * row_bytes + c * item
    else:
        per_row = row_bytes // item
        out = c // per_row * lbo + r // 8 * sbo + r % 8 * row_bytes + c % per_row * item
    out.flags.writeable = False
    return out


@lru_cache(maxsize=64)
def fragment_map(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols), each WARPGROUP x n/2: the element of a 64 x n wgmma tile that each
    register of each warpgroup thread holds (``wgmma_fragment``)."""
    rows: np.ndarray = np.zeros((WARPGROUP, n // 2), np.int64)
    cols: np.ndarray = np.zeros((WARPGROUP, n // 2), np.int64)
    for t in range(WARPGROUP):
        for reg in range(n // 2):
            rows[t, reg], cols[t, reg] = wgmma_fragment(t, reg)
    rows.flags.writeable = cols.flags.writeable = False
    return rows, cols
