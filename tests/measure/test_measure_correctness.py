"""The correctness criterion and the per-workload input/reference cache."""
from __future__ import annotations

import numpy as np

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
