"""The channelwise ops (global average pool, channel gate): real generated kernels against
numpy in NCHW and blocked layouts, every config of their small spaces, and the reference's
meaning (torch's)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import autotune
from autotune.driver import compile as compile_kernel
from autotune.driver import config_space

LLVM = autotune.Target("llvm")
LAYOUTS = ["NCHW", "NCHW8c", f"NCHW{LLVM.vector_lanes}c"]


def _check(wl, cfg=None) -> None:
    args = wl.random_args(1)
    compile_kernel(wl, LLVM, cfg)(*args)
    ref = wl.reference(args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", ["global_avg_pool2d", "channel_mul"])
def test_every_config_matches_numpy(op: str, layout: str) -> None:
    wl = autotune.workload(op, N=2, C=48, H=5, W=7, layout=layout)
    space = config_space(wl, LLVM)
    assert 1 < len(space) <= 16
    for i in range(len(space)):
        _check(wl, space.get(i))


def test_the_reference_is_torchs() -> None:
    pool = autotune.workload("global_avg_pool2d", N=1, C=16, H=3, W=4)
    gate = autotune.workload("channel_mul", N=1, C=16, H=3, W=4)
    x, s = pool.random_args(0)[0], gate.random_args(0)[1]
    t = torch.from_numpy(x)
    np.testing.assert_allclose(pool.reference([x]), torch.nn.functional.adaptive_avg_pool2d(
        t, 1).numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(gate.reference([x, s]), (t * torch.from_numpy(s)).numpy())
    assert pool.flops() == gate.flops() == 16 * 3 * 4


def test_cuda_has_no_channelwise_kernels() -> None:
    wl = autotune.workload("channel_mul", N=1, C=16, H=3, W=4)
    with pytest.raises(autotune.ops.WorkloadError) as err:
        config_space(wl, autotune.Target("cuda -arch=sm_90"))
    assert err.value.field == "op"
