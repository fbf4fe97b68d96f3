"""The wgmma template's kernels run in the CUDA execution model (warpgroups as coroutines,
mbarrier phases, TMA boxes in the swizzled layout, wgmma descriptors and fragments) and
match the float32 reference within the dtype's tolerance: sampled configs and the default
of every op and dtype, ragged shapes and epilogues, and blocks walking several tiles."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune import driver
from autotune.codegen.cuda.compiler import prepare_kernel
from autotune.codegen.cuda.simulate import run_kernel
from autotune.ops.dtypes import dtype_info, to_float32
from autotune.schedule.templates.cuda_common import limits
from autotune.schedule.templates.cuda_wgmma import WgmmaTiling, tiling_reason
from autotune.schedule.templates.cuda_wgmma_lower import lower_wgmma
from tests.cuda.wgmma_cases import DTYPES, OPS, sample_valid, target, workloads

SAMPLED = 2  # per workload, besides the default


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_sampled_configs_are_correct_in_the_model(op, dtype):
    tol = dtype_info(dtype).rtol
    for i, wl in enumerate(workloads(op, dtype)):
        sp = driver.config_space(wl, target())
        for cfg in [sp.default(), *sample_valid(wl, SAMPLED, seed=11 + i)]:
            err = autotune.simulate_cuda(wl, cfg, target(), seed=i)
            assert err <= tol, f"{wl} {dict(cfg)}: error {err:.3g} > {tol}"


@pytest.mark.parametrize("tile, sms", [
    (WgmmaTiling(1, 1, 64, 2, "m", 4, 0), 3),      # 9 tiles per block, the ring wraps
    (WgmmaTiling(2, 1, 128, 3, "n", 4, 1), 2),     # a group in flight across stages
    (WgmmaTiling(1, 2, 128, 2, "m", 1, 1), 4),     # 2 slices of 64 rows a consumer
    (WgmmaTiling(2, 1, 256, 4, "m", 16, 0), 1),    # 128 x 256, 2 consumers, one block
], ids=["64x64-3sm", "128x128-2sm-inflight", "128x128-mtiles", "128x256-1sm"])
def test_persistent_blocks_over_many_tiles(tile, sms):
    """A grid of fewer blocks than tiles: each block walks its tiles in raster order with
    the stage ring and barrier phases carried from tile to tile, batches and ragged
    edges (M, N and K not multiples of the tile) included."""
    wl = autotune.workload("batch_matmul", B=2, M=200, N=136, K=200, dtype="bfloat16",
                           epilogue=("bias", "relu"))
    assert tiling_reason(tile, limits(target())) is None
    func = lower_wgmma(wl, tile, sms)
    body, launch = prepare_kernel(func, target())
    assert launch.grid[0] == sms
    args = wl.random_args(1)
    ref = wl.reference(args[:-1])
    run_kernel(func, body, launch, args)
    err = np.max(np.abs(to_float32(args[-1], wl.dtype) - ref)) / np.max(np.abs(ref))
    assert err <= dtype_info(wl.dtype).rtol


def test_shuffled_blocks_and_repeated_launches():
    wl = autotune.workload("matmul", M=130, N=200, K=72, dtype="float16",
                           epilogue=("scale_shift", "residual", "relu6"))
    err = autotune.simulate_cuda(wl, None, target(), block_seed=3, launches=2)
    assert err <= dtype_info("float16").rtol
