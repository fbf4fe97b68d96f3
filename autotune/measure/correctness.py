"""Correctness against the numpy reference: the criterion, and the per-workload data cache.

Criterion: ``max|out - ref| <= atol + rtol * max|ref|``: one scale for the whole output,
because fp32 reductions err in proportion to the output's magnitude, not each element's.
A half output (in its storage form) is widened exactly first, and checked under the larger
of the run's tolerances and its dtype's (`tolerance`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from autotune.lru import LRU
from autotune.ops.dtypes import dtype_info, storage_nan, to_float32


def tolerance(dtype: str, rtol: float, atol: float) -> tuple[float, float]:
    """The (rtol, atol) an output of ``dtype`` is checked under: the larger of the run's
    (``MeasureOptions``) and the dtype's own (`autotune.ops.dtypes.DTYPE_INFO`)."""
    info = dtype_info(dtype)
    return max(rtol, info.rtol), max(atol, info.atol)


def check_output(out: np.ndarray, ref: np.ndarray, rtol: float, atol: float,
                 dtype: str = "float32") -> Optional[str]:
    """None when ``out`` (in ``dtype``'s storage form) matches the float32 ``ref`` under
    `tolerance`; else why not (NaN count or the max error)."""
    rtol, atol = tolerance(dtype, rtol, atol)
    out = to_float32(np.asarray(out), dtype) if dtype != "float32" else np.asarray(out)
    if out.shape != ref.shape:
        return f"output shape {out.shape} differs from the reference's {ref.shape}"
    nan = np.isnan(out)
    if nan.any():
        first = np.unravel_index(int(np.argmax(nan)), out.shape)
        return (f"output has {int(nan.sum())} NaN of {out.size} elements "
                f"(first at index {tuple(map(int, first))})")
    ref64: np.ndarray = ref.astype(np.float64, copy=False)
    err = np.abs(out.astype(np.float64) - ref64)
    worst = int(np.argmax(err))
    max_err = float(err.flat[worst])
    tol = atol + rtol * float(np.max(np.abs(ref64), initial=0.0))
    if max_err <= tol:  # also False for inf
        return None
    at = tuple(map(int, np.unravel_index(worst, out.shape)))
    return (f"max abs error {max_err:.4g} > tolerance {tol:.4g} at index {at} "
            f"(got {float(out.flat[worst]):.6g}, expected {float(ref.flat[worst]):.6g})")


@dataclass
class _Entry:
    pristine: list[np.ndarray]  # random_args(seed), never handed to a kernel
    work: list[np.ndarray]      # the arrays kernels run on, refreshed before each candidate
    reference: np.ndarray


class WorkloadData:
    """Inputs and reference per (workload, seed), computed once and kept for the last few
    workloads; every candidate gets fresh copies, so a kernel that scribbles on its inputs
    cannot fail the next one."""

    def __init__(self, capacity: int = 4) -> None:
        self._entries: LRU[tuple[str, int], _Entry] = LRU(capacity)

    def prepare(self, workload: Any, seed: int) -> None:
        """Compute and cache the data (slow the first time: the reference runs here)."""
        self._entry(workload, seed)

    def fresh_args(self, workload: Any, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
        """(kernel arguments with the output NaN-filled, reference output)."""
        e = self._entry(workload, seed)
        for w, p in zip(e.work[:-1], e.pristine[:-1]):
            np.copyto(w, p)
        e.work[-1].fill(storage_nan(workload_dtype(workload)))  # unwritten elements show as NaN
        return e.work, e.reference

    def _entry(self, workload: Any, seed: int) -> _Entry:
        key = (str(workload.key), seed)
        e = self._entries.get(key)
        if e is None:
            pristine = workload.random_args(seed)
            work = workload.random_args(seed)  # allocated by the workload: aligned as it wants
            ref = np.asarray(workload.reference(pristine[:-1]))
            e = _Entry(pristine, work, ref)
            self._entries.put(key, e)
        return e



def workload_dtype(workload: Any) -> str:
    """The workload's dtype name (float32 for test workloads that name none)."""
    return str(getattr(workload, "dtype", "float32"))
