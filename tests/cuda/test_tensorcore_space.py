"""The tensor-core template's space: chosen for half dtypes only, defaults valid on any
shape, each rule of `tiling_reason` rejecting what breaks it (by name), and the loop AST
it lowers to (fragments, cp.async where a row is contiguous, element fills elsewhere)."""
from __future__ import annotations

from dataclasses import replace

import pytest

import autotune
from autotune import driver
from autotune.ir.stmt import (
    AsyncCopy,
    AsyncWait,
    For,
    ForKind,
    MmaLoad,
    MmaStore,
    MmaSync,
    Scope,
    Store,
    walk_stmts,
)
from autotune.schedule.templates import cuda_tensorcore as tc
from autotune.schedule.templates import get_template
from autotune.target import CudaLimits
from tests.cuda.tensorcore_cases import DTYPES, OPS, SHAPES, sample_valid, target, workloads

LIMITS = target().cuda
assert LIMITS is not None


def test_template_is_chosen_by_dtype():
    for op in OPS:
        assert get_template(op, "cuda", "float16").name == "cuda_tensorcore"
        assert get_template(op, "cuda", "bfloat16").name == "cuda_tensorcore"
        assert get_template(op, "cuda").name != "cuda_tensorcore"  # float32 keeps its own
    # depthwise convs run on CUDA cores in every dtype
    assert get_template("depthwise_conv2d", "cuda", "float16") is \
        get_template("depthwise_conv2d", "cuda")
    with pytest.raises(ValueError, match="float16"):
        get_template("max_pool2d", "cuda", "float16")


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
@pytest.mark.parametrize("op", OPS)
def test_defaults_are_valid_on_every_shape(op, arch):
    extra = {"matmul": [dict(M=1, N=1, K=1), dict(M=4096, N=4096, K=4096)],
             "batch_matmul": [dict(B=1, M=8, N=300, K=7)],
             "conv2d": [dict(N=1, C=64, H=56, W=56, K=64, R=3, S=3, stride=1, pad=1)]}[op]
    for shape in SHAPES[op] + extra:
        for dt in DTYPES:
            wl = autotune.workload(op, dtype=dt, **shape)
            sp = driver.config_space(wl, target(arch))
            cfg = sp.default()
            assert sp.invalid_reason(cfg) is None, (wl, cfg)
            t = tc.tiling(cfg)
            _, M, N, _ = tc.gemm_dims(wl)
            # clamped: half the tile would not cover the problem, unless already minimal
            assert t.bm // 2 < max(M, 16) and t.bn // 2 < max(N, 16), (wl, t)


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90"])
def test_default_of_a_large_matmul_is_the_full_tile_with_four_stages(arch):
    """128 x 128 x 32, 8 warps, 4 stages: 83 KB of shared memory, valid on each arch."""
    wl = autotune.workload("matmul", M=4096, N=4096, K=4096, dtype="float16")
    sp = driver.config_space(wl, target(arch))
    t = tc.tiling(sp.default())
    assert (t.bm, t.bn, t.block_k, t.warps, t.mma, t.stages, t.pad) == (
        128, 128, 32, (2, 4), (16, 16, 16), 4, 8)
    assert t.shared_bytes == 84480 and sp.invalid_reason(sp.default()) is None


@pytest.mark.parametrize("lim, shape, tile", [
    (target("sm_90").cuda, dict(M=2048, N=1024, K=4096), (64, 128, 2)),  # N < 2048
    (target("sm_90").cuda, dict(M=4096, N=2048, K=1024), (128, 128, 4)),
    (target("sm_90").cuda, dict(M=2048, N=2048, K=4096), (128, 128, 4)),
    # 4 stages (84480 bytes) past a 64 KB opt-in limit: 3 (65536); past 48 KB: today's 2
    (CudaLimits("sm_80", max_shared_per_block_optin=65536, multiprocessors=108),
     dict(M=4096, N=4096, K=4096), (128, 128, 3)),
    (CudaLimits("sm_80", multiprocessors=108), dict(M=4096, N=4096, K=4096), (128, 128, 2)),
    # no cp.async pipeline below sm_80: one stage
    (CudaLimits("sm_75", max_shared_per_block_optin=65536, multiprocessors=40),
     dict(M=4096, N=4096, K=4096), (128, 128, 1)),
])
def test_large_gemms_get_a_deeper_pipeline_where_it_is_valid(lim, shape, tile):
    wl = autotune.workload("matmul", dtype="float16", **shape)
    t = tc.tiling(tc.default_values(wl, lim))
    assert (t.bm, t.bn, t.stages) == tile
    assert tc.tiling_reason(t, lim) is None


LADDER = {  # tiling -> the archs whose opt-in shared memory per block it fits
    "128x256 s3, 90112 B": (replace(tc.Tiling((16, 16, 16), (2, 4), (4, 4), 32), stages=3),
                            {"sm_80", "sm_86", "sm_89", "sm_90"}),
    "128x256 s4, 117248 B": (tc.Tiling((16, 16, 16), (2, 4), (4, 4), 32, stages=4),
                             {"sm_80", "sm_90"}),
    "256x128 bk64 s3, 172032 B": (tc.Tiling((16, 16, 16), (4, 2), (4, 4), 64, stages=3),
                                  {"sm_90"}),
    "256x128 bk64 s4 512 threads, 234496 B": (
        tc.Tiling((16, 16, 16), (4, 4), (4, 2), 64, stages=4), set()),
}


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_89", "sm_90"])
@pytest.mark.parametrize("label", list(LADDER))
def test_shared_memory_past_48kb_is_valid_up_to_each_archs_opt_in_limit(arch, label):
    """The tiles of these are dynamic shared memory: 163 KB on sm_80, 99 KB on sm_86/89,
    227 KB on sm_90 (the CUDA programming guide's per-block opt-in limits)."""
    t, fits = LADDER[label]
    lim = target(arch).cuda
    assert t.shared_bytes > 49152
    reason = tc.tiling_reason(t, lim)
    if arch in fits:
        assert reason is None, reason
    else:
        assert reason == (f"{t.shared_bytes} bytes of shared memory > opt-in limit "
                          f"{lim.max_shared_per_block_optin} of {arch}")


@pytest.mark.parametrize("op, shape", [
    ("matmul", dict(M=1024, N=1024, K=1024)),
    ("conv2d", dict(N=1, C=64, H=56, W=56, K=64, R=3, S=3, stride=1, pad=1)),
    ("conv2d", dict(N=1, C=256, H=14, W=14, K=256, R=3, S=3, stride=1, pad=1)),
])
def test_default_tiles_shrink_until_the_grid_fills_the_gpu(op, shape):
    """Down to 32 x 32: a 1024^2 output in 128^2 tiles would leave 68 of 132 SMs idle."""
    wl = autotune.workload(op, dtype="float16", **shape)
    tgt = target("sm_90")
    t = tc.tiling(driver.config_space(wl, tgt).default())
    batch, M, N, _ = tc.gemm_dims(wl)
    blocks = batch * -(-M // t.bm) * -(-N // t.bn)
    assert blocks >= tgt.cuda.multiprocessors or (t.bm, t.bn) == (32, 32), (t, blocks)
    assert blocks < 2 * tgt.cuda.multiprocessors or (t.bm, t.bn) == (128, 128)


GOOD = tc.Tiling((16, 16, 16), (2, 4), (4, 2), 32)


@pytest.mark.parametrize("tiling, needle", [
    (replace(GOOD, warps=(4, 16)), "threads per block"),
    (replace(GOOD, frags=(4, 4), block_k=64, stages=4, pad=72), "shared memory"),
    (replace(GOOD, warps=(1, 1), frags=(8, 8), block_k=16, stages=1), "fragment registers"),
    (replace(GOOD, pad=4), "ldm 36 of the A tile"),
    (replace(GOOD, mma=(32, 8, 16), frags=(1, 2)), "not 32-byte aligned"),
    (replace(GOOD, block_k=8), "larger than the tile"),
    (replace(GOOD, mma=(16, 16, 8)), "not one of wmma's"),
])
def test_tiling_reason_names_each_rule(tiling, needle):
    assert tc.tiling_reason(GOOD, LIMITS) is None
    reason = tc.tiling_reason(tiling, LIMITS)
    assert reason is not None and needle in reason, reason


def test_two_stages_need_sm80():
    old = CudaLimits("sm_75", max_shared_per_block_optin=65536)
    assert "needs sm_80" in (tc.tiling_reason(GOOD, old) or "")
    assert tc.tiling_reason(replace(GOOD, stages=1), old) is None


def test_space_rejects_reachable_violations_before_build():
    wl = autotune.workload("matmul", M=512, N=512, K=512, dtype="float16")
    sp = driver.config_space(wl, target())
    base = dict(sp.default())
    cases = {"shared memory": dict(warps_m=4, warps_n=4, frags_m=4, frags_n=2, block_k=64,
                                   stages=4),
             "fragment registers": dict(warps_m=1, warps_n=1, frags_m=8, frags_n=8,
                                        block_k=16, stages=1),
             "32-byte aligned": dict(mma_shape="32x8x16")}
    for needle, change in cases.items():
        cfg = sp.config({**base, **change})
        assert needle in (sp.invalid_reason(cfg) or ""), (change, sp.invalid_reason(cfg))
        with pytest.raises(driver.InvalidConfig, match=needle):
            driver.lower(wl, target(), cfg)


def test_estimates_match_what_lowering_builds():
    """Threads and shared bytes `Tiling` reports are those of the loop AST: static up to
    48 KB, dynamic past it."""
    from autotune.codegen.cuda.passes import launch_of
    dynamic = 0
    for op in OPS:
        for wl in workloads(op, "float16"):
            for cfg in sample_valid(wl, 6, seed=1):
                t = tc.tiling(cfg)
                launch = launch_of(driver.lower(wl, target(), cfg))
                assert launch.block == (t.threads, 1, 1)
                big = t.shared_bytes > 49152
                assert (launch.shared_bytes, launch.dynamic_shared_bytes) == (
                    (0, t.shared_bytes) if big else (t.shared_bytes, 0))
                dynamic += big
    assert dynamic > 0


def _stmts(func, kind):
    return [s for s in walk_stmts(func.body) if isinstance(s, kind)]


def test_lowered_matmul_uses_fragments_and_cp_async():
    wl = autotune.workload("matmul", M=100, N=96, K=64, dtype="float16", epilogue="bias")
    func = driver.lower(wl, target())
    text = str(func)  # print(autotune.lower(...)) works
    assert "mma_load(" in text and "async_copy(" in text and "mma_store(" in text
    t = tc.tiling(driver.config_space(wl, target()).default())
    loads = _stmts(func, MmaLoad)
    assert {s.layout for s in loads} == {"row"} and {s.ldm for s in loads} == {t.lda, t.ldb}
    copies = _stmts(func, AsyncCopy)
    assert copies and all(c.elems == 8 and c.valid is not None for c in copies)
    assert [w.pending for w in _stmts(func, AsyncWait)] == [0]  # double buffering
    sp = driver.config_space(wl, target())
    three = driver.lower(wl, target(), sp.config({**dict(sp.default()), "stages": 3,
                                                  "frags_m": 2, "frags_n": 1}))
    assert [w.pending for w in _stmts(three, AsyncWait)] == [1]
    four = driver.lower(wl, target(), sp.config({**dict(sp.default()), "stages": 4,
                                                 "frags_m": 2, "frags_n": 1}))
    assert [w.pending for w in _stmts(four, AsyncWait)] == [2]  # tile ko landed, 2 newer pending
    assert len(_stmts(func, MmaSync)) == 1 and len(_stmts(func, MmaStore)) == 1
    scopes = {s.buffer.scope for s in walk_stmts(func.body) if hasattr(s, "buffer")}
    assert {Scope.WMMA_A, Scope.WMMA_B, Scope.WMMA_ACC, Scope.SHARED} <= scopes
    kk = next(s for s in walk_stmts(func.body) if isinstance(s, For) and s.var.name == "kk")
    assert kk.kind is ForKind.UNROLLED


def test_unaligned_rows_fall_back_to_element_fills():
    """K = 11: no row of A starts 4-byte aligned, so A is filled element by element (guarded,
    zero past the tails); B's rows (N = 36) take 8-byte copies."""
    wl = autotune.workload("matmul", M=13, N=36, K=11, dtype="bfloat16")
    func = driver.lower(wl, target())
    assert {c.src.name for c in _stmts(func, AsyncCopy)} == {"B"}
    assert {c.elems for c in _stmts(func, AsyncCopy)} == {4}
    assert {s.buffer.name for s in _stmts(func, Store)} == {"A_shared", "out"}


def test_one_stage_waits_for_every_copy():
    wl = autotune.workload("conv2d", N=1, C=16, H=8, W=8, K=16, R=1, S=1, stride=1, pad=0,
                           dtype="float16")
    sp = driver.config_space(wl, target())
    cfg = sp.config({**dict(sp.default()), "stages": 1, "unroll_k": False})
    func = driver.lower(wl, target(), cfg)
    assert [w.pending for w in _stmts(func, AsyncWait)] == [0]
    # a 1x1 conv's im2col is the input itself: both operands are copied asynchronously
    assert {c.src.name for c in _stmts(func, AsyncCopy)} == {"weight", "data"}
    kk = next(s for s in walk_stmts(func.body) if isinstance(s, For) and s.var.name == "kk")
    assert kk.kind is ForKind.SERIAL


def test_a_3x3_conv_gathers_its_im2col_tile():
    wl = autotune.workload("conv2d", N=2, C=8, H=7, W=7, K=16, R=3, S=3, stride=1, pad=1,
                           dtype="float16")
    func = driver.lower(wl, target())
    assert {c.src.name for c in _stmts(func, AsyncCopy)} == {"weight"}  # OIHW rows: C*R*S=72
    assert "B_shared" in {s.buffer.name for s in _stmts(func, Store)}
    grid = [s.extent for s in walk_stmts(func.body)
            if isinstance(s, For) and s.kind is ForKind.BLOCK_Z]
    assert grid == [2]  # one image per blockIdx.z
