"""The correctness criterion and the per-workload input/reference cache."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.measure.correctness import WorkloadData, check_output
from tests.measure.measure_fakes import CopyWorkload


def test_matching_output_passes_within_tolerance_scaled_by_the_output():
    ref = np.array([100.0, -50.0, 1.0], np.float32)
    assert check_output(ref.copy(), ref, rtol=1e-4, atol=1e-4) is None
    # 0.005 off on an element of magnitude 1 is fine when the output reaches 100
    assert check_output(ref + np.float32(0.005), ref, rtol=1e-4, atol=1e-4) is None
    msg = check_output(ref + np.float32(0.5), ref, rtol=1e-4, atol=1e-4)
    assert msg and msg.startswith("max abs error 0.5")


def test_nan_anywhere_is_wrong():
    ref = np.ones((2, 3), np.float32)
    out = ref.copy()
    out[1, 2] = np.nan
    msg = check_output(out, ref, rtol=1, atol=1)
    assert msg and "1 NaN" in msg and "(1, 2)" in msg


def test_inf_and_zeros_are_wrong():
    ref = np.full(4, 0.7, np.float32)
    assert check_output(np.full(4, np.inf, np.float32), ref, rtol=1e-4, atol=1e-4)
    msg = check_output(np.zeros(4, np.float32), ref, rtol=1e-4, atol=1e-4)
    assert msg and "expected 0.7" in msg


class CountingWorkload(CopyWorkload):
    references = 0

    def reference(self, args):
        CountingWorkload.references += 1
        return super().reference(args)


def test_reference_is_computed_once_and_inputs_are_fresh_per_candidate():
    data, wl = WorkloadData(), CountingWorkload(16)
    args, ref = data.fresh_args(wl, seed=3)
    pristine = args[0].copy()
    args[0][:] = 0  # a kernel scribbling on its input
    args[1][:] = 1
    args2, ref2 = data.fresh_args(wl, seed=3)
    assert CountingWorkload.references == 1 and ref2 is ref
    np.testing.assert_array_equal(args2[0], pristine)
    assert np.isnan(args2[1]).all()


def test_cache_keeps_only_the_last_few_workloads():
    data = WorkloadData(capacity=2)
    for n in (4, 5, 6):
        data.prepare(CopyWorkload(n), seed=0)
    assert len(data._entries) == 2


# ---- half dtypes: storage form, and which tolerance decides ----------------------------

def test_tolerance_is_the_larger_of_the_runs_and_the_dtypes():
    from autotune.measure.correctness import tolerance
    from autotune.ops.dtypes import DTYPE_INFO

    assert tolerance("float32", 1e-4, 1e-4) == (1e-4, 1e-4)
    assert tolerance("float32", 1e-2, 0.0) == (1e-2, 1e-4)
    bf16 = DTYPE_INFO["bfloat16"]
    assert tolerance("bfloat16", 1e-4, 1e-4) == (bf16.rtol, max(bf16.atol, 1e-4))
    assert tolerance("float16", 0.5, 0.25) == (0.5, 0.25)  # a looser run wins


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_output_is_widened_and_checked_under_its_dtypes_tolerance(dtype):
    from autotune.ops import workload
    from autotune.ops.dtypes import DTYPE_INFO, to_float32, to_storage

    wl = workload("matmul", M=32, N=24, K=256, epilogue=["bias"], dtype=dtype)
    args = wl.random_args(seed=1)
    ref = wl.reference(args)
    rounded = to_storage(ref, dtype)  # what a correct kernel stores: one final rounding
    assert check_output(rounded, ref, rtol=1e-4, atol=1e-4, dtype=dtype) is None
    # the same output read under float32's tolerance would fail: the dtype's decides
    assert check_output(to_float32(rounded, dtype), ref, 1e-4, 1e-4) is not None
    scale = float(np.abs(ref).max())
    off = ref.copy()
    off[3, 5] += np.float32(4 * DTYPE_INFO[dtype].rtol * scale)
    msg = check_output(to_storage(off, dtype), ref, rtol=1e-4, atol=1e-4, dtype=dtype)
    assert msg and "at index (3, 5)" in msg
    nan = rounded.copy()
    nan[0, 1] = to_storage(np.array([np.nan], np.float32), dtype)[0]
    assert "1 NaN" in check_output(nan, ref, 1e-4, 1e-4, dtype)


def test_fresh_args_refill_a_bfloat16_output_with_nan():
    from autotune.ops import workload
    from autotune.ops.dtypes import to_float32

    data, wl = WorkloadData(), workload("matmul", M=8, N=8, K=8, dtype="bfloat16")
    args, ref = data.fresh_args(wl, seed=0)
    assert args[-1].dtype == np.uint16 and ref.dtype == np.float32
    args[-1][:] = 0
    args, _ = data.fresh_args(wl, seed=0)
    assert np.isnan(to_float32(args[-1], "bfloat16")).all()
