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


@pytest.mark.parametrize("wl, split", [
    (autotune.workload("conv2d", N=1, C=128, H=7, W=7, K=64, R=3, S=3, stride=1, pad=1,
                       dtype="float16", layout="NHWC", epilogue=("bias", "residual", "relu")),
     4),
    (autotune.workload("matmul", M=64, N=72, K=1000, dtype="bfloat16"), 8),
])
def test_split_k_in_shuffled_block_orders_over_repeated_launches(wl, split):
    """Split-K's partials, published by a fence and the counter's atomic among the
    consumers (named barriers), summed by whichever block arrives last, whatever the
    blocks' order; the counters left at zero for the next launch; a split's overhang past
    the reduction reads zeros (1000 = 15.6 steps of 64 in 8 splits of 2)."""
    sp = driver.config_space(wl, target())
    cfg = sp.config(dict(sp.default()) | dict(split_k=split))
    assert sp.invalid_reason(cfg) is None
    for seed in (1, 2):
        err = autotune.simulate_cuda(wl, cfg, target(), seed=seed, block_seed=seed,
                                     launches=2)
        assert err <= dtype_info(wl.dtype).rtol


def _without(s, kind):
    """``s`` with every statement of type ``kind`` dropped (a planted protocol fault)."""
    from autotune.ir.stmt import Allocate, For, IfThenElse, Seq
    if isinstance(s, Seq):
        return Seq([_without(c, kind) for c in s.stmts if not isinstance(c, kind)])
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, _without(s.body, kind))
    if isinstance(s, Allocate):
        return Allocate(s.buffer, _without(s.body, kind))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, _without(s.then, kind),
                          None if s.else_ is None else _without(s.else_, kind))
    return s


@pytest.mark.parametrize("fault, kind", [
    ("NamedSync", "uninitialized"),  # the arrival's count read before the atomic wrote it
    ("Fence", "race"),               # partials read that no atomic published
])
def test_split_k_without_its_barrier_or_fence_is_caught(fault, kind):
    """Without the consumers' named barriers, or without their fences, the last block reads
    what nothing ordered before it: the model says so."""
    from dataclasses import replace

    from autotune.codegen.cuda.simulate import CudaExecutionError
    from autotune.ir import stmt
    wl = autotune.workload("matmul", M=64, N=64, K=512, dtype="float16")
    tile = WgmmaTiling(2, 1, 64, 2, split_k=4)
    func = lower_wgmma(wl, tile, 132)
    broken = replace(func, body=_without(func.body, getattr(stmt, fault)))
    body, launch = prepare_kernel(broken, target())
    with pytest.raises(CudaExecutionError) as err:
        run_kernel(broken, body, launch, wl.random_args(0))
    assert err.value.kind == kind
