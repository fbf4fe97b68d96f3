"""A grouped conv's kernel computes over N*groups images of C/groups channels, yet takes
and checks the workload's arrays ([N, C, H, W] data, [K, C/groups, R, S] weight)."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune import driver

LLVM = autotune.Target("llvm")


def test_kernel_takes_the_workloads_arrays_and_refuses_its_own_view() -> None:
    wl = autotune.workload("group_conv2d", N=2, C=8, H=6, W=6, K=12, R=3, S=3, stride=1,
                           pad=1, groups=4, epilogue=("bias", "residual"))
    kernel = driver.load(driver.build(wl, LLVM), LLVM)
    # the loop AST sees 8 images of 2 channels; the kernel says the workload's shapes
    assert kernel.arg_buffers[0].shape == (8, 2, 6, 6)
    assert kernel.arg_shapes == tuple(spec.shape for spec in wl.arg_specs)
    args = wl.random_args(0)
    kernel(*args)
    np.testing.assert_allclose(args[-1], wl.reference(args), rtol=1e-4, atol=1e-4)
    viewed = [args[0].reshape(8, 2, 6, 6), *args[1:]]
    with pytest.raises(ValueError, match=r"argument 0 \(data\).*expected shape \(2, 8, 6, 6\)"):
        kernel(*viewed)


def test_a_conv2d_kernel_keeps_its_buffers_shapes() -> None:
    wl = autotune.workload("conv2d", N=1, C=4, H=6, W=6, K=8, R=3, S=3, stride=1, pad=1)
    func = driver.lower(wl, LLVM)
    assert "arg_shapes" not in func.attrs


@pytest.mark.parametrize("layout", ["NCHW", "NCHW8c"])
def test_the_prepacked_form_packs_the_weight_once_outside_the_kernel(layout: str) -> None:
    from autotune.schedule.prepack import pack_operand

    wl = autotune.workload("group_conv2d", N=1, C=16, H=5, W=5, K=32, R=3, S=3, stride=1,
                           pad=1, groups=2, prepacked=True, layout=layout)
    kernel = driver.load(driver.build(wl, LLVM), LLVM)
    assert kernel.pack is not None  # the kernel reads the packed weight as an argument
    assert kernel.pack.arg_shapes[0] == (32, 8, 3, 3)  # the pack takes the weight as given
    args = wl.random_args(1)
    kernel(*pack_operand(wl, kernel.pack, args))
    np.testing.assert_allclose(args[-1], wl.reference(args), rtol=1e-4, atol=1e-4)
