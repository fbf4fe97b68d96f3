"""On a GPU host (marker ``cuda_device``; skipped elsewhere, run by scripts/gpu-check.sh):
the tensor-core kernels nvcc builds, run on the device, match the float32 reference within
their dtype's tolerance, for the default and sampled configs of every op and dtype. Here,
without a GPU, the execution model checks the same kernels (test_tensorcore_simulate.py)."""
from __future__ import annotations

import pytest

import autotune
from autotune import driver
from autotune.measure.correctness import check_output
from tests.cuda.cuda_cases import target as device_target
from tests.cuda.tensorcore_cases import DTYPES, OPS, sample_valid, workloads

SAMPLED = 3  # per workload, besides the default


@pytest.mark.cuda_device
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_tensorcore_kernels_match_the_reference_on_the_gpu(op, dtype, gpu, nvcc):
    tgt = device_target()
    for i, wl in enumerate(workloads(op, dtype)):
        sp = driver.config_space(wl, tgt)
        for cfg in [sp.default(), *sample_valid(wl, SAMPLED, seed=7 + i, arch=tgt.arch)]:
            kernel = autotune.compile(wl, tgt, cfg)
            args = wl.random_args(i)
            ref = wl.reference(args[:-1])
            kernel(*args)
            wrong = check_output(args[-1], ref, 0.0, 0.0, dtype)
            assert wrong is None, f"{wl} {dict(cfg)}: {wrong}"
