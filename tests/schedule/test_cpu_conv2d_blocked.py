"""The CPU template for conv2d in NCHW[x]c: real generated kernels against numpy (strides
1 and 2, 1x1 / 3x3 / 7x7 windows, padding, residual and activation epilogues; NCHW data
into blocked output, and one block into another), sampled configs, the prepacked form, and
a default register tile that fits the vector registers."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.driver import compile as compile_kernel
from autotune.driver import compile_prepacked, config_space
from autotune.ops import WorkloadError, aligned_empty
from autotune.schedule.templates.cpu_conv2d_blocked import unrolled_step
from autotune.target.cpu_facts import facts_of

LLVM = autotune.Target("llvm")
LANES = LLVM.vector_lanes

CASES = [  # (params, epilogue, layout)
    (dict(N=1, C=32, H=10, W=9, K=32, R=3, S=3, stride=1, pad=1), ["bias", "relu"],
     f"NCHW{LANES}c"),
    (dict(N=2, C=16, H=9, W=11, K=32, R=3, S=3, stride=2, pad=1),
     ["scale_shift", "residual", "relu"], f"NCHW{LANES}c"),
    (dict(N=1, C=32, H=8, W=8, K=64, R=1, S=1, stride=1, pad=0), ["residual"], "NCHW32c"),
    (dict(N=1, C=32, H=8, W=7, K=16, R=1, S=1, stride=2, pad=0), [], "NCHW8c"),
    (dict(N=1, C=16, H=15, W=14, K=16, R=7, S=7, stride=2, pad=3), ["bias", "relu6"],
     "NCHW8c"),
    # a model's first conv: NCHW data (3 channels), blocked output
    (dict(N=1, C=3, H=17, W=15, K=32, R=7, S=7, stride=2, pad=3), ["bias", "relu"],
     f"NCHW>NCHW{LANES}c"),
    # a move between blocks (24 channels, which 16 does not divide), with a residual in the
    # output's block
    (dict(N=1, C=32, H=6, W=7, K=24, R=1, S=1, stride=1, pad=0), ["bias", "residual"],
     "NCHW16c>NCHW8c"),
    (dict(N=1, C=24, H=6, W=7, K=32, R=3, S=3, stride=1, pad=1), ["bias", "hardswish"],
     "NCHW8c>NCHW16c"),
]


def _check(kernel, wl) -> None:
    args = wl.random_args(1)
    kernel(*args)
    ref = wl.reference(args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


@pytest.mark.parametrize("params, epilogue, layout", CASES)
def test_default_config_matches_numpy(params: dict, epilogue: list, layout: str) -> None:
    wl = autotune.workload("conv2d", epilogue=epilogue, layout=layout, **params)
    _check(compile_kernel(wl, LLVM), wl)


def test_sampled_configs_match_numpy() -> None:
    for case in (1, 7):
        params, epilogue, layout = CASES[case]
        wl = autotune.workload("conv2d", epilogue=epilogue, layout=layout, **params)
        sp = config_space(wl, LLVM)
        rng = np.random.default_rng(0)
        valid = [cfg for cfg in sp.sample(rng, 40) if not sp.invalid_reason(cfg)][:4]
        assert len(valid) == 4
        for cfg in valid:
            _check(compile_kernel(wl, LLVM, cfg), wl)


def test_prepacked_blocked_conv_reads_the_weight_packed_by_blocks() -> None:
    params, epilogue, layout = CASES[0]
    wl = autotune.workload("conv2d", epilogue=epilogue, layout=layout, prepacked=True,
                           **params)
    kernel, pack = compile_prepacked(wl, LLVM)
    assert pack is not None
    args = wl.random_args(2)
    packed = aligned_empty(pack.arg_buffers[-1].shape)
    pack(args[1], packed)
    assert packed.shape == (32 // LANES, 32 // LANES, 3, 3, LANES, LANES)
    # Wp[ko, co, r, s, ci, ki] = W[ko*x + ki, co*x + ci, r, s]
    assert packed[0, 0, 1, 2, 3, 1] == args[1][1, 3, 1, 2]
    kernel(args[0], packed, *args[2:])
    ref = wl.reference(args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_default_register_tile_fits_the_vector_registers() -> None:
    facts = facts_of(LLVM)
    for params, epilogue, layout in CASES:
        wl = autotune.workload("conv2d", epilogue=epilogue, layout=layout, **params)
        cfg = config_space(wl, LLVM).default()
        acc, _ = unrolled_step(wl.block, LANES, 1, cfg)
        assert acc <= facts.vector_registers, (wl, cfg)
    resnet = autotune.workload("conv2d", N=1, C=64, H=56, W=56, K=64, R=3, S=3, stride=1,
                               pad=1, layout=f"NCHW{LANES}c")
    cfg = config_space(resnet, LLVM).default()
    acc, _ = unrolled_step(resnet.block, LANES, 1, cfg)
    assert 3 * facts.vector_registers // 4 >= acc >= facts.vector_registers // 4, cfg


@pytest.mark.parametrize("mcpu", ["skylake-avx512", "haswell"])
def test_default_register_tile_counts_a_narrow_block_as_a_register(mcpu: str) -> None:
    """A block of half the lanes still takes a whole register per pixel: the default tile
    keeps within 3/4 of them (MNASNet-1.3's stem, 3 -> 40 channels in NCHW8c on 16 lanes,
    took 2 blocks x 16 pixels, all 32 registers, and ran at 54 GFLOP/s; 1.8x faster in
    1 x 16). Defaults only: the template's code is the same."""
    target = autotune.Target(f"llvm -mcpu={mcpu}")
    facts = facts_of(target)
    half = facts.lanes // 2
    for C, H, K, R, stride, layout in (
            (3, 224, 5 * half, 3, 2, f"NCHW>NCHW{half}c"),            # a stem
            (32 * half, 13, 125 * half, 1, 1, f"NCHW{2 * half}c>NCHW{half}c"),  # classifier
            (21 * half, 28, 7 * half, 1, 1, f"NCHW{half}c")):          # a projection
        wl = autotune.workload("conv2d", N=1, C=C, H=H, W=H, K=K, R=R, S=R, stride=stride,
                               pad=R // 2, layout=layout, prepacked=True)
        cfg = config_space(wl, target).default()
        acc, _ = unrolled_step(wl.block, facts.lanes, 1, cfg)
        assert acc <= 3 * facts.vector_registers // 4, (str(wl), cfg)


@pytest.mark.parametrize("mcpu, most", [("skylake-avx512", 22), ("haswell", 12)])
def test_default_register_tile_stops_short_of_24_accumulators(mcpu: str, most: int) -> None:
    """With 32 registers the default tile holds at most 22 accumulators: Inception-V3's and
    SqueezeNet's convs whose defaults filled 24 (2 channel blocks x 12 pixels) ran 1.3-5x
    slower than the next tile down. With 16 the bound stays 3/4 (12)."""
    target = autotune.Target(f"llvm -mcpu={mcpu}")
    lanes = facts_of(target).lanes
    for C, H, K, R, S in ((768, 12, 192, 1, 1), (192, 12, 192, 7, 1), (128, 12, 128, 1, 7),
                          (32, 54, 128, 3, 3), (64, 54, 80, 1, 1)):
        wl = autotune.workload("conv2d", N=1, C=C, H=H, W=H, K=K, R=R, S=S, stride=1,
                               pad=(R // 2, S // 2), layout=f"NCHW{lanes}c", prepacked=True)
        cfg = config_space(wl, target).default()
        acc, _ = unrolled_step(wl.block, lanes, 1, cfg)
        assert most // 2 < acc <= most, (str(wl), cfg)


def test_cuda_refuses_a_blocked_layout() -> None:
    params, _, layout = CASES[0]
    wl = autotune.workload("conv2d", layout=layout, **params)
    with pytest.raises(WorkloadError, match="llvm targets only") as err:
        config_space(wl, autotune.Target("cuda -arch=sm_90"))
    assert err.value.field == "layout"


@pytest.mark.parametrize("case", [1, 7])
@pytest.mark.parametrize("reduce", ["taps_channels", "channels_taps"])
@pytest.mark.parametrize("unroll, pad", [("unroll", "inline"), ("none", "buffer")])
def test_reduction_orders_and_padding_match_numpy(case: int, reduce: str, unroll: str,
                                                  pad: str) -> None:
    params, epilogue, layout = CASES[case]
    wl = autotune.workload("conv2d", epilogue=epilogue, layout=layout, **params)
    values = config_space(wl, LLVM).default().to_dict()["knobs"]
    config = {"knobs": {**values, "reduce": reduce, "unroll_rs": unroll, "pad": pad}}
    _check(compile_kernel(wl, LLVM, config), wl)


@pytest.mark.parametrize("mcpu, R, layout, order", [
    ("rocketlake", 3, "NCHW16c", ("channels_taps", "unroll")),
    ("haswell", 3, "NCHW8c", ("channels_taps", "unroll")),
    ("znver5", 3, "NCHW16c", ("taps_channels", "none")),  # measured slower there
    ("rocketlake", 1, "NCHW16c", ("taps_channels", "none")),  # no taps to order
    ("rocketlake", 7, "NCHW>NCHW16c", ("taps_channels", "none")),  # a first conv's
])
def test_default_reduction_order_follows_the_cpu_and_the_window(mcpu: str, R: int,
                                                                layout: str, order) -> None:
    wl = autotune.workload("conv2d", N=1, C=3 if layout.startswith("NCHW>") else 64, H=28,
                           W=28, K=64, R=R, S=R, stride=1, pad=R // 2, layout=layout,
                           epilogue=["bias", "relu"])
    target = autotune.Target(f"llvm -mcpu={mcpu} -vector-bits={wl.block * 32}")
    default = config_space(wl, target).default()
    assert (default["reduce"], default["unroll_rs"]) == order
    assert config_space(wl, target).invalid_reason(default) is None


@pytest.mark.parametrize("case", [1, 3, 6, 7])
@pytest.mark.parametrize("parallel", [1, 2, 3])
def test_task_accumulators_match_numpy(case: int, parallel: int) -> None:
    """reduce_at "task": the input channel blocks' outer split outside the task's pixels,
    one block per step of it (partial sums kept across steps), every parallel depth."""
    params, epilogue, layout = CASES[case]
    wl = autotune.workload("conv2d", epilogue=epilogue, layout=layout, **params)
    sp = config_space(wl, LLVM)
    values = sp.default().to_dict()["knobs"]
    blocks = params["C"] // wl.in_block
    config = sp.config({**values, "reduce_at": "task", "parallel": parallel,
                        "tile_rc": (blocks, 1)})
    assert sp.invalid_reason(config) is None
    _check(compile_kernel(wl, LLVM, config), wl)


def test_default_accumulates_over_a_task_only_where_pixels_are_few() -> None:
    def default(H: int, C: int, K: int):
        wl = autotune.workload("conv2d", N=1, C=C, H=H, W=H, K=K, R=1, S=1, stride=1, pad=0,
                               layout="NCHW16c", prepacked=True)
        return config_space(wl, autotune.Target("llvm -mcpu=rocketlake -cores=2 "
                                                "-vector-bits=512")), wl
    sp, _ = default(7, 2048, 512)
    few = sp.default()
    assert few["reduce_at"] == "task" and few["parallel"] == 1
    assert few["tile_y"][0] == few["tile_x"][0] == 1  # a task: a channel tile, every pixel
    sp, _ = default(28, 512, 128)
    assert sp.default()["reduce_at"] == "tile"
    # 1232 channels (77 blocks) in register tiles of 4 blocks: a tail, guarded inside a
    # task's reduction, ran 2x slower with a 50 KB accumulator (more than any L1 here)...
    sp, _ = default(14, 1232, 1232)
    assert 77 % sp.default()["tile_k"][2] != 0 and sp.default()["reduce_at"] == "tile"
    # ... and 1.7x faster with a 6 KB one (RegNet-Y-400MF's 440 channels at 7x7)
    wl = autotune.workload("conv2d", N=1, C=440, H=7, W=7, K=440, R=1, S=1, stride=1, pad=0,
                           layout="NCHW8c", prepacked=True)
    few = config_space(wl, autotune.Target("llvm -mcpu=rocketlake -cores=2 "
                                           "-vector-bits=512")).default()
    assert 55 % few["tile_k"][2] != 0 and few["reduce_at"] == "task"
    # NCHW data (ShuffleNet-V2 x2.0's 488 channels) keeps a register tile's accumulator
    wl = autotune.workload("conv2d", N=1, C=488, H=14, W=14, K=488, R=1, S=1, stride=1,
                           pad=0, layout="NCHW>NCHW8c", prepacked=True)
    assert config_space(wl, autotune.Target("llvm -mcpu=rocketlake -cores=2 "
                                            "-vector-bits=512")).default()["reduce_at"] == "tile"
    # a whole 56x56 image of 64 channels per task does not fit a worker's stack
    sp, wl = default(56, 64, 64)
    whole = sp.config({**sp.default().to_dict()["knobs"], "reduce_at": "task", "parallel": 1,
                       "order": ("k0", "y0", "x0", "k1", "y1", "x1")})
    assert "task accumulator" in (sp.invalid_reason(whole) or "")


def test_a_zen_core_with_a_large_l2_keeps_few_pixel_tasks_in_register_tiles() -> None:
    """ResNet-50's 14x14 1x1 conv: one task per channel tile either way; on Zen 4 (1 MiB
    of L2) its accumulator is a register tile's, on a smaller L2 the task's."""
    from dataclasses import replace

    from autotune.schedule.templates import cpu_conv2d_blocked as blocked

    wl = autotune.workload("conv2d", N=1, C=1024, H=14, W=14, K=256, R=1, S=1, stride=1,
                           pad=0, layout="NCHW16c", prepacked=True)
    knobs = list(config_space(wl, autotune.Target("llvm -mcpu=znver4 -cores=2 "
                                                  "-vector-bits=512")).knobs)
    zen4 = replace(facts_of(autotune.Target("llvm -mcpu=znver4 -cores=2 -vector-bits=512")),
                   l2=1 << 20)
    large = blocked.default_values(wl, zen4, knobs)
    small = blocked.default_values(wl, replace(zen4, l2=512 << 10), knobs)
    assert large["reduce_at"] == "tile" and small["reduce_at"] == "task"
    assert large["tile_k"] == small["tile_k"] and large["tile_k"][1] == 1
    rocket = replace(zen4, mcpu="rocketlake")
    assert blocked.default_values(wl, rocket, knobs)["reduce_at"] == "task"


def _guarded_reduction_steps(wl, cfg) -> int:
    """The guards (ifs) inside the reduction loops (rco, rci, rr, rs) of the lowered kernel
    of ``wl`` under ``cfg``: the guarded reads of a tile."""
    from autotune.ir.stmt import For, IfThenElse
    from autotune.schedule.lower import lower_schedule
    from autotune.schedule.templates import cpu_conv2d_blocked
    func = lower_schedule(cpu_conv2d_blocked.schedule(wl, LLVM, cfg), "conv")
    count, stack = 0, [(func.body, False)]
    while stack:
        stmt, in_reduction = stack.pop()
        count += in_reduction and isinstance(stmt, IfThenElse)
        in_reduction |= isinstance(stmt, For) and stmt.var.name.startswith("r")
        stack += [(c, in_reduction) for c in stmt.children()]
    return count


@pytest.mark.parametrize("params, layout", [
    # a prime output width and height (SqueezeNet's stem: 109; here 7), no padding: a padded
    # copy is made for the overhang alone
    (dict(N=1, C=3, H=19, W=19, K=32, R=7, S=7, stride=2, pad=0), f"NCHW>NCHW{LANES}c"),
    (dict(N=1, C=32, H=13, W=13, K=32, R=3, S=3, stride=1, pad=1), f"NCHW{LANES}c"),
    (dict(N=1, C=32, H=13, W=13, K=24, R=1, S=1, stride=1, pad=0), "NCHW16c>NCHW8c"),
])
@pytest.mark.parametrize("reduce_at", ["tile", "task"])
def test_tiles_past_the_edges_read_a_padded_copy_unguarded(params: dict, layout: str,
                                                           reduce_at: str) -> None:
    """Tiles of 4 rows and 2 columns overhang 7- and 13-wide outputs: with the padding in a
    buffer, the copy covers what they read and only the write-back is guarded; inlined
    without padding, the reads are; both match numpy."""
    from autotune.schedule.templates.cpu_conv2d_blocked import overhang
    wl = autotune.workload("conv2d", epilogue=["bias", "relu"], layout=layout, **params)
    sp = config_space(wl, LLVM)
    values = sp.default().to_dict()["knobs"]
    tiles = {"tile_y": (-(-wl.out_h // 4), 1, 4), "tile_x": (-(-wl.out_w // 2), 1, 2)}
    assert overhang(wl.out_h, tiles["tile_y"]) > 0 and overhang(wl.out_w, tiles["tile_x"]) > 0
    for pad in ("buffer", "inline"):
        cfg = sp.config({**values, **tiles, "pad": pad, "reduce_at": reduce_at,
                         "tile_rc": (params["C"] // wl.in_block, 1)})
        assert sp.invalid_reason(cfg) is None
        _check(compile_kernel(wl, LLVM, cfg), wl)
        guarded = _guarded_reduction_steps(wl, cfg)
        if pad == "buffer":
            assert guarded == 0
        elif params["pad"] == 0:  # no padding to select on: the reads past the edges are
            assert guarded > 0


def test_overhang_is_what_the_tiles_reach_past_the_extent() -> None:
    from autotune.schedule.templates.cpu_conv2d_blocked import overhang
    assert overhang(112, (1, 14, 8)) == 0
    assert overhang(109, (2, 8, 8)) == 19        # 14 tiles of 8, in 2 groups of 8: 128
    assert overhang(109, (14, 8, 1)) == 3         # 109 -> 109 x 1 -> 14 groups of 8: 112
    assert overhang(13, (7, 1, 2)) == 1
