"""Half-precision GEMMs for the Hopper (sm_90a) wgmma template: ragged M and N tiles (N and
K multiples of 8, as TMA needs), K shorter than, equal to and longer than one 64-wide k
tile, batches, epilogues of every kind; and config sampling."""
from __future__ import annotations

import numpy as np

import autotune
from autotune import driver
from autotune.ops import Workload
from autotune.space import Config

ARCH = "sm_90a"
DTYPES = ("float16", "bfloat16")
OPS = ("matmul", "batch_matmul")
SHAPES: dict[str, list[dict]] = {
    "matmul": [dict(M=100, N=136, K=200), dict(M=300, N=264, K=64), dict(M=64, N=64, K=24)],
    "batch_matmul": [dict(B=2, M=70, N=72, K=128), dict(B=3, M=130, N=200, K=40)],
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
