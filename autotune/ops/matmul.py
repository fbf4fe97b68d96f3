"""Matrix multiplication: `matmul` (A[M,K] @ B[K,N]) and `batch_matmul` (per batch)."""
from __future__ import annotations

import numpy as np

from autotune.ops.spec import OpSpec, Params, ParamSpec, Shape, sizes

_M = ParamSpec("M", "rows of A and of the output")
_N = ParamSpec("N", "columns of B and of the output")
_K = ParamSpec("K", "reduction length (columns of A, rows of B)")


def _inputs(params: Params) -> tuple[tuple[str, Shape], ...]:
    m, n, k = sizes(params, "MNK")
    return (("A", (m, k)), ("B", (k, n)))


def _output_shape(params: Params) -> Shape:
    m, n = sizes(params, "MN")
    return (m, n)


def _macs(params: Params) -> int:
    m, n, k = sizes(params, "MNK")
    return m * n * k


def _batch_inputs(params: Params) -> tuple[tuple[str, Shape], ...]:
    b, m, n, k = sizes(params, "BMNK")
    return (("A", (b, m, k)), ("B", (b, k, n)))


def _batch_output_shape(params: Params) -> Shape:
    b, m, n = sizes(params, "BMN")
    return (b, m, n)


def _batch_macs(params: Params) -> int:
    b, m, n, k = sizes(params, "BMNK")
    return b * m * n * k


def _compute(params: Params, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # np.matmul broadcasts over the leading batch axis, so one body serves both ops.
    return np.matmul(a, b)


MATMUL = OpSpec(
    name="matmul",
    doc="C[M,N] = A[M,K] @ B[K,N]",
    params=(_M, _N, _K),
    channel_axis=-1,
    inputs=_inputs,
    output_shape=_output_shape,
    macs=_macs,
    compute=_compute,
)

BATCH_MATMUL = OpSpec(
    name="batch_matmul",
    doc="C[B,M,N] = A[B,M,K] @ B[B,K,N] for each batch index",
    params=(ParamSpec("B", "batch count"), _M, _N, _K),
    channel_axis=-1,
    inputs=_batch_inputs,
    output_shape=_batch_output_shape,
    macs=_batch_macs,
    compute=_compute,
)
