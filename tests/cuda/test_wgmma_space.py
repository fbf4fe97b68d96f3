"""The Hopper wgmma template's space: which workloads and targets take it, the rules its
validity enforces (each named), and defaults shaped by the problem's size."""
from __future__ import annotations

import pytest

import autotune
from autotune import driver
from autotune.ops import WorkloadError
from autotune.ops.dtypes import target_refusal
from autotune.schedule.templates import WGMMA, template_for
from autotune.schedule.templates.cuda_wgmma import WgmmaTiling, tiling, tiling_reason
from tests.cuda.wgmma_cases import target


def _wl(op="matmul", dtype="float16", **shape):
    shape = shape or dict(M=256, N=256, K=256)
    return autotune.workload(op, dtype=dtype, **shape)


CONV = dict(N=1, C=16, H=8, W=8, K=16, R=3, S=3, stride=1, pad=1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", ["matmul", "batch_matmul", "conv2d"])
def test_sm90a_half_gemms_and_nhwc_convs_take_the_wgmma_template(op, dtype):
    shape = {"matmul": dict(M=64, N=64, K=64), "batch_matmul": dict(B=2, M=64, N=64, K=64),
             "conv2d": dict(CONV, layout="NHWC")}[op]
    assert template_for(_wl(op, dtype, **shape), target()) is WGMMA


@pytest.mark.parametrize("tgt, dtype, change", [
    ("cuda -arch=sm_90", "float16", {}),        # wmma reads NCHW
    ("cuda -arch=sm_90a", "float32", {}),       # no float32 wgmma kernel
    ("cuda -arch=sm_90a", "float16", dict(C=12)),  # rows of 24 bytes: no TMA
    ("llvm", "float32", {}),
])
def test_an_nhwc_conv_without_a_wgmma_kernel_is_refused_at_layout(tgt, dtype, change):
    wl = _wl("conv2d", dtype, **(CONV | change | dict(layout="NHWC")))
    with pytest.raises(WorkloadError) as err:
        driver.config_space(wl, autotune.Target(tgt))
    assert err.value.loc == ("layout",) and "NHWC" in str(err.value)


def test_conv_tiles_are_pixel_rectangles_that_fit_a_tma_box():
    wl = _wl("conv2d", **dict(CONV, C=64, H=56, W=56, K=64, layout="NHWC"))
    sp = driver.config_space(wl, target())
    t = tiling(sp.default())
    assert t.tile_w == 8 and t.tile_h * t.tile_w == t.bm  # 56 = 7 x 8: no column wasted
    from autotune.schedule.templates.cuda_wgmma import conv_reason
    assert "divide" in conv_reason(WgmmaTiling(1, 1, 64, 2, tile_w=48), wl)
    strided = _wl("conv2d", **dict(CONV, stride=8, layout="NHWC"))
    assert "box" in conv_reason(WgmmaTiling(2, 2, 64, 2, tile_w=64), strided)


@pytest.mark.parametrize("wl, tgt", [
    (_wl(), "cuda -arch=sm_90"),                          # sm_90 keeps wmma
    (_wl(M=64, N=64, K=60), "cuda -arch=sm_90a"),         # K rows of 120 bytes: no TMA
    (_wl(M=64, N=36, K=64), "cuda -arch=sm_90a"),         # N rows of 72 bytes: no TMA
    (autotune.workload("conv2d", N=1, C=8, H=8, W=8, K=16, R=3, S=3, stride=1, pad=1,
                       dtype="float16"), "cuda -arch=sm_90a"),
])
def test_other_half_workloads_keep_the_wmma_template(wl, tgt):
    assert template_for(wl, autotune.Target(tgt)).name == "cuda_tensorcore"


def test_sm90a_is_a_cuda_target_of_its_own_that_runs_bfloat16():
    t = target()
    assert t.key == "cuda -arch=sm_90a" and t != autotune.Target("cuda -arch=sm_90")
    assert target_refusal("bfloat16", "cuda", "sm_90a") is None
    assert t.cuda.max_shared_per_block_optin == 232448


def test_validity_names_each_rule():
    lim = target().cuda
    ok = WgmmaTiling(2, 1, 256, 4)
    assert tiling_reason(ok, lim) is None
    assert "sm_90a" in tiling_reason(ok, autotune.Target("cuda -arch=sm_90").cuda)
    assert "opt-in limit" in tiling_reason(WgmmaTiling(2, 1, 256, 5), lim)
    assert "accumulator registers" in tiling_reason(WgmmaTiling(2, 2, 256, 2), lim)
    assert "box" in tiling_reason(WgmmaTiling(2, 1, 96, 2), lim)


def test_more_than_256_rows_per_block_is_refused_as_a_tma_box():
    lim = target().cuda
    reason = tiling_reason(WgmmaTiling(2, 2, 64, 2), lim)
    assert reason is None  # 256 rows: the largest box
    assert "TMA box" in tiling_reason(WgmmaTiling(3, 2, 64, 2), lim)


@pytest.mark.parametrize("size, shape", [
    (4096, (2, 1, 256)),   # 512 tiles of 128 x 256 fill 132 SMs
    (1024, (1, 1, 128)),   # 128 x 128 would leave half idle: 64 x 128 (128 tiles)
    (128, (1, 1, 64)),     # nothing fills them: the smallest tile
])
def test_defaults_take_the_largest_tile_that_fills_the_device(size, shape):
    wl = _wl(M=size, N=size, K=size)
    sp = driver.config_space(wl, target())
    cfg = sp.default()
    assert sp.invalid_reason(cfg) is None
    t = tiling(cfg)
    assert (t.consumers, t.m_tiles, t.block_n) == shape
    assert t.stages == 4


def test_every_knob_value_appears_in_some_valid_config():
    wl = _wl(M=512, N=512, K=512)
    sp = driver.config_space(wl, target())
    import numpy as np
    seen: dict[str, set] = {}
    for c in sp.sample(np.random.default_rng(0), 400):
        if sp.invalid_reason(c) is None:
            for k, v in dict(c).items():
                seen.setdefault(k, set()).add(v)
    assert seen["block_n"] == {64, 128, 192, 256}
    assert seen["stages"] >= {2, 3, 4}
    assert seen["consumers"] == {1, 2} and seen["inflight"] == {0, 1}


@pytest.mark.parametrize("hw, c, split", [(56, 64, 2), (28, 128, 4), (14, 256, 8), (7, 512, 8)])
def test_small_convs_split_k_to_fill_the_device(hw, c, split):
    """ResNet-18's 3x3 convs at batch 1 have 8 to 49 tiles of 64 x 64 for 132 SMs."""
    wl = _wl("conv2d", **dict(CONV, C=c, H=hw, W=hw, K=c, layout="NHWC"))
    cfg = driver.config_space(wl, target()).default()
    assert cfg["split_k"] == split


def test_split_k_validity_names_its_rules():
    from autotune.schedule.templates.cuda_wgmma import split_reason
    wl = _wl(M=64, N=64, K=256)   # 4 k steps of 64
    assert split_reason(WgmmaTiling(1, 1, 64, 2, split_k=4), wl) is None
    assert "no k step" in split_reason(WgmmaTiling(1, 1, 64, 2, split_k=8), wl)
    big = _wl(M=8192, N=8192, K=8192)
    assert "workspace" in split_reason(WgmmaTiling(2, 1, 256, 2, split_k=16), big)
