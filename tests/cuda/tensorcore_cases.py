"""Half-precision workloads and config sampling shared by the tensor-core tests: odd shapes
(tails in M, N and K), a 3x3 conv with a 7x7 output, a strided padded conv, a 1x1 conv
(its im2col is the input itself), and epilogues of every kind."""
from __future__ import annotations

import numpy as np

import autotune
from autotune import driver
from autotune.ops import Workload
from autotune.space import Config

DTYPES = ("float16", "bfloat16")
ARCHS = ("sm_80", "sm_90")
STATIC_SHARED = 49152  # bytes: past this the tiles are dynamic shared memory
# 128 x 256 x 32, 8 warps of 4 x 4 fragments, 3 stages: 90112 bytes of shared memory
LARGE_TILE = {"split_k": 1, "mma_shape": "16x16x16", "warps_m": 2, "warps_n": 4, "frags_m": 4,
              "frags_n": 4, "block_k": 32, "stages": 3, "pad": 8, "unroll_k": True, "vector": 8}
OPS = ("matmul", "batch_matmul", "conv2d")
SHAPES: dict[str, list[dict]] = {
    "matmul": [dict(M=100, N=100, K=100), dict(M=13, N=37, K=11), dict(M=64, N=72, K=48)],
    "batch_matmul": [dict(B=2, M=13, N=37, K=24), dict(B=3, M=32, N=16, K=40)],
    "conv2d": [
        dict(N=1, C=8, H=7, W=7, K=16, R=3, S=3, stride=1, pad=1),
        dict(N=2, C=5, H=9, W=13, K=6, R=3, S=3, stride=2, pad=1, dilation=1),
        dict(N=2, C=16, H=8, W=8, K=24, R=1, S=1, stride=1, pad=0),
    ],
}
EPILOGUES: tuple[tuple[str, ...], ...] = (
    (), ("bias", "relu"), ("scale_shift", "residual", "relu6"), ("bias", "residual"),
    ("scale_shift",), ("relu",))


def target(arch: str = "sm_80") -> autotune.Target:
    return autotune.Target(f"cuda -arch={arch}")


def workloads(op: str, dtype: str) -> list[Workload]:
    """Each shape of ``op``, cycling through the epilogues."""
    return [autotune.workload(op, epilogue=EPILOGUES[i % len(EPILOGUES)], dtype=dtype, **s)
            for i, s in enumerate(SHAPES[op])]


def sample_valid(wl: Workload, n: int, seed: int, arch: str = "sm_80") -> list[Config]:
    """``n`` distinct valid configs of ``wl``'s tensor-core space, drawn with ``seed``."""
    sp = driver.config_space(wl, target(arch))
    rng = np.random.default_rng(seed)
    out = [c for c in sp.sample(rng, 20 * n) if sp.invalid_reason(c) is None]
    return out[:n]


def sample_dynamic(wl: Workload, n: int, seed: int, arch: str = "sm_80") -> list[Config]:
    """``n`` distinct valid configs of ``wl`` whose tiles need more than the 48 KB of static
    shared memory (dynamic shared memory), drawn with ``seed``."""
    from autotune.schedule.templates.cuda_tensorcore import tiling
    sp = driver.config_space(wl, target(arch))
    rng = np.random.default_rng(seed)
    out = [c for c in sp.sample(rng, 400)
           if sp.invalid_reason(c) is None and tiling(c).shared_bytes > STATIC_SHARED]
    return out[:n]
