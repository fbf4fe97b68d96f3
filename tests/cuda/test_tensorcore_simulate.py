"""The tensor-core kernels run in the CUDA execution model (`autotune.simulate_cuda`: wmma
fragments with their real operand layouts, cp.async groups, races, barriers) and match the
float32 reference within the dtype's tolerance: sampled configs and the default, float16
and bfloat16, every op, odd shapes and epilogues."""
from __future__ import annotations

import pytest

import autotune
from autotune import driver
from autotune.ops.dtypes import dtype_info
from autotune.schedule.templates import cuda_tensorcore as tc
from tests.cuda.tensorcore_cases import (
    ARCHS,
    DTYPES,
    LARGE_TILE,
    OPS,
    sample_dynamic,
    sample_valid,
    target,
    workloads,
)

SAMPLED = 2  # per workload, besides the default


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_sampled_configs_are_correct(op, dtype):
    tol = dtype_info(dtype).rtol
    for i, wl in enumerate(workloads(op, dtype)):
        sp = driver.config_space(wl, target())
        for cfg in [sp.default(), *sample_valid(wl, SAMPLED, seed=5 + i)]:
            err = autotune.simulate_cuda(wl, cfg, target(), seed=i)
            assert err <= tol, f"{wl} {dict(cfg)}: error {err:.3g} > {tol}"


@pytest.mark.parametrize("change", [
    dict(stages=1, unroll_k=False),
    dict(stages=3),
    dict(stages=3, block_k=32, vector=4),
    dict(pad=0, vector=2),
    dict(mma_shape="8x32x16", frags_n=1),
    dict(mma_shape="32x8x16", warps_n=1, frags_n=1, frags_m=1),
])
def test_pipeline_and_shape_variants_over_several_blocks_and_k_tiles(change):
    """2 x 3 blocks of 64 x 64 (or narrower), five k tiles with a tail in every dimension."""
    wl = autotune.workload("matmul", M=120, N=136, K=72, dtype="float16",
                           epilogue=("bias", "relu"))
    sp = driver.config_space(wl, target())
    base = dict(sp.default()) | dict(warps_m=2, warps_n=2, frags_m=2, frags_n=2, block_k=16)
    cfg = sp.config(base | change)
    assert sp.invalid_reason(cfg) is None
    assert autotune.simulate_cuda(wl, cfg, target()) <= dtype_info("float16").rtol


def test_a_resnet_conv_with_a_7x7_output():
    wl = autotune.workload("conv2d", N=1, C=32, H=7, W=7, K=32, R=3, S=3, stride=1, pad=1,
                           dtype="bfloat16", epilogue=("scale_shift", "residual", "relu"))
    assert autotune.simulate_cuda(wl, None, target("sm_90")) <= dtype_info("bfloat16").rtol


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("op", OPS)
def test_sampled_configs_over_48kb_are_correct(op, arch):
    """Configs whose tiles are dynamic shared memory (poison until written, like static
    arrays in the model), float16 and bfloat16."""
    for i, wl in enumerate(workloads(op, DTYPES[0]) + workloads(op, DTYPES[1])[:1]):
        cfgs = sample_dynamic(wl, 1, seed=13 + i, arch=arch)
        assert cfgs, wl
        err = autotune.simulate_cuda(wl, cfgs[0], target(arch), seed=i)
        assert err <= dtype_info(wl.dtype).rtol, f"{wl} {dict(cfgs[0])}: error {err:.3g}"


@pytest.mark.parametrize("change", [
    {},                                                   # 128 x 256, 3 stages: 88 KB
    dict(warps_m=4, warps_n=2, stages=4, block_k=16),     # 256 x 128, 4 stages: 74 KB
    dict(frags_n=2, stages=4, block_k=64, vector=4),      # 128 x 128, 4 stages: 148 KB
])
def test_large_tiles_over_several_blocks_and_k_tiles(change):
    """A 128 x 256 tile and its kin on 2 x 2 blocks (or 1 x 3), tails in every
    dimension, more k tiles than stages."""
    wl = autotune.workload("matmul", M=136, N=264, K=200, dtype="float16",
                           epilogue=("bias", "relu"))
    sp = driver.config_space(wl, target("sm_90"))
    cfg = sp.config(LARGE_TILE | change)
    assert sp.invalid_reason(cfg) is None and tc.tiling(cfg).shared_bytes > 49152
    assert autotune.simulate_cuda(wl, cfg, target("sm_90")) <= dtype_info("float16").rtol
