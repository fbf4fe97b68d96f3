"""Default tiles of the CUDA-core templates (float32 conv2d and matmul): ranked by the
occupancy model, they fill the GPU on small outputs, launch, and run right."""
from __future__ import annotations

from math import prod

import pytest

import autotune
from autotune import driver
from autotune.schedule.templates import cuda_conv2d, cuda_matmul
from autotune.schedule.templates.cuda_occupancy import OperandAxis, ranked_tiles
from autotune.space import Split
from autotune.target import CudaLimits
from tests.cuda.cuda_cases import target

# ResNet-18's fp32 layers at batch 1; under the old fixed default the 7x7x512 conv ran 64
# blocks of 64 threads on the H100's 132 SMs (1.27 ms against cuDNN's 0.12 ms)
RESNET18 = [dict(C=3, H=224, K=64, R=7, stride=2), dict(C=64, H=56, K=64, R=3, stride=1),
            dict(C=64, H=56, K=128, R=3, stride=2), dict(C=64, H=56, K=128, R=1, stride=2),
            dict(C=128, H=28, K=128, R=3, stride=1), dict(C=256, H=14, K=256, R=3, stride=1),
            dict(C=256, H=14, K=512, R=3, stride=2), dict(C=512, H=7, K=512, R=3, stride=1)]


def _conv(C: int, H: int, K: int, R: int, stride: int) -> autotune.Workload:
    return autotune.workload("conv2d", N=1, C=C, H=H, W=H, K=K, R=R, S=R, stride=stride,
                             pad=R // 2, epilogue=("bias", "relu"))


def _launch(wl: autotune.Workload) -> tuple[int, int, int]:
    """(blocks, threads per block, outputs) of ``wl``'s default config on sm_90."""
    cfg = driver.config_space(wl, target()).default()
    if wl.op == "conv2d":
        axes, shape = ("tile_f", "tile_y", "tile_x"), cuda_conv2d.block_shape(wl, cfg)
        outputs = wl.dim("K") * wl.out_h * wl.out_w
    else:
        axes, shape = ("tile_i", "tile_j"), cuda_matmul.block_shape(wl, cfg)
        outputs = wl.dim("M") * wl.dim("N")
    return prod(cfg[a][0] for a in axes), prod(shape.threads), outputs


@pytest.mark.parametrize("layer", [*RESNET18, "classifier"],
                         ids=[f"{d['C']}x{d['H']}_k{d['K']}_{d['R']}x{d['R']}s{d['stride']}"
                              for d in RESNET18] + ["classifier"])
def test_defaults_fill_the_gpu(layer):
    """Every layer keeps at least half of the threads it could use busy (all its outputs,
    or 128 per SM), in blocks of at least a warp."""
    wl = (autotune.workload("matmul", M=1, N=1000, K=512, epilogue=("bias",))
          if layer == "classifier" else _conv(**layer))
    sms = target().cuda.multiprocessors
    blocks, threads, outputs = _launch(wl)
    assert threads >= 32 and blocks * threads >= min(outputs, 128 * sms) / 2, (blocks, threads)


def test_default_blocks_fit_the_register_file():
    """A large matmul's default keeps threads x registers within the SM's file (a block
    that outgrows it fails to launch), here with 64 accumulators a thread."""
    wl = autotune.workload("matmul", M=4096, N=4096, K=4096)
    cfg = driver.config_space(wl, target()).default()
    per_thread = cfg["tile_i"][3] * cfg["tile_j"][3]
    threads = cfg["tile_i"][2] * cfg["tile_j"][2]
    assert per_thread >= 16 and threads * (24 + per_thread) <= target().cuda.regs_per_block


def test_the_ranking_trades_blocks_for_reuse():
    """With outputs to spare the model grows the register tile; with few it spreads them."""
    lim = CudaLimits("sm_90", multiprocessors=132)

    def best(extent: int) -> tuple[tuple[int, ...], ...]:
        knobs = [Split("i", extent, 4, max_inner=8), Split("j", extent, 4, max_inner=8)]
        ops = ((OperandAxis(0),), (OperandAxis(1, contiguous=True),))
        return next(ranked_tiles(knobs, (1, 0), ops, reduction=512, grid=1, lim=lim))

    big, small = best(2048), best(64)
    assert big[0][3] * big[1][3] >= 16          # a register tile of 16+ outputs
    assert small[0][3] * small[1][3] <= 2       # one or two outputs a thread
    assert small[0][0] * small[1][0] >= 16      # over 16+ blocks


@pytest.mark.parametrize("op, shape", [
    ("conv2d", dict(N=1, C=16, H=7, W=7, K=48, R=3, S=3, stride=1, pad=1)),
    ("conv2d", dict(N=1, C=8, H=15, W=15, K=24, R=1, S=1, stride=2, pad=0)),
    ("group_conv2d", dict(N=2, C=8, H=7, W=7, K=16, R=3, S=3, stride=1, pad=1, groups=2)),
    ("matmul", dict(M=1, N=100, K=33)),
    ("batch_matmul", dict(B=2, M=9, N=40, K=17)),
], ids=["conv_7x7", "conv_1x1_s2", "group_conv", "gemv", "batch_matmul"])
def test_defaults_are_right_in_the_execution_model(op, shape):
    wl = autotune.workload(op, **shape)
    assert autotune.simulate_cuda(wl) < 1e-5


def test_every_layer_of_resnet18_gets_a_valid_default():
    for layer in RESNET18:
        sp = driver.config_space(_conv(**layer), target())
        assert sp.invalid_reason(sp.default()) is None
