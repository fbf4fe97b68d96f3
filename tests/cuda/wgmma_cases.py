"""Half-precision GEMMs and NHWC convs for the Hopper (sm_90a) wgmma template: ragged M
and N tiles (N and K multiples of 8, as TMA needs), K shorter than, equal to and longer
than one 64-wide k tile, batches; convs with padding, stride 2, dilation 2, channels that
are not a multiple of 64, a 1x1; epilogues of every kind; and config sampling."""
from __future__ import annotations

import numpy as np

import autotune
from autotune import driver
from autotune.ops import Workload
from autotune.space import Config

ARCH = "sm_90a"
DTYPES = ("float16", "bfloat16")
OPS = ("matmul", "batch_matmul", "conv2d")
NHWC = dict(layout="NHWC")
SHAPES: dict[str, list[dict]] = {
    "matmul": [dict(M=100, N=136, K=200), dict(M=300, N=264, K=64), dict(M=64, N=64, K=24)],
    "batch_matmul": [dict(B=2, M=70, N=72, K=128), dict(B=3, M=130, N=200, K=40)],
    "conv2d": [
        dict(N=1, C=16, H=9, W=13, K=24, R=3, S=3, stride=1, pad=1, **NHWC),
        dict(N=2, C=72, H=10, W=11, K=40, R=3, S=3, stride=2, pad=1, **NHWC),
        dict(N=1, C=8, H=12, W=9, K=16, R=3, S=3, stride=1, pad=2, dilation=2, **NHWC),
        dict(N=2, C=32, H=6, W=7, K=64, R=1, S=1, stride=1, pad=0, **NHWC),
    ],
}
EPILOGUES: tuple[tuple[str, ...], ...] = (
    (), ("bias", "relu"), ("scale_shift", "residual", "relu6"), ("bias", "residual"),
    ("relu",))


def target() -> autotune.Target:
    return autotune.Target(f"cuda -arch={ARCH}")


def workloads(op: str, dtype: str) -> list[Workload]:
    """Each shape of ``op``, cycling through the epilogues."""
    return [autotune.workload(op, epilogue=EPILOGUES[i % len(EPILOGUES)], dtype=dtype, **s)
            for i, s in enumerate(SHAPES[op])]


def sample_valid(wl: Workload, n: int, seed: int) -> list[Config]:
    """``n`` distinct valid configs of ``wl``'s wgmma space, drawn with ``seed``."""
    sp = driver.config_space(wl, target())
    rng = np.random.default_rng(seed)
    return [c for c in sp.sample(rng, 20 * n) if sp.invalid_reason(c) is None][:n]
