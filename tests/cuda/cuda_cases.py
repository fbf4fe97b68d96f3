"""Workloads and config sampling shared by the CUDA tests: small shapes with tails
(13, 37, 11), stride 2, padding, dilation, a channel multiplier, every epilogue."""
from __future__ import annotations

from typing import Iterator

import numpy as np

import autotune
from autotune import driver
from autotune.ops import Workload
from autotune.space import Config

ARCH = "sm_90"
# fast nvcc flags for bulk "does it compile" checks; production flags are checked too
FAST_NVCC = ("-Xcicc", "-O1", "-Xptxas", "-O1")

EPILOGUES: tuple[tuple[str, ...], ...] = (
    (), ("bias",), ("scale_shift",), ("relu",), ("bias", "relu"), ("scale_shift", "relu"),
    ("bias", "relu6"), ("bias", "residual", "relu"), ("scale_shift", "residual"),
    ("bias", "residual", "silu"))

SHAPES: dict[str, list[dict]] = {
    "matmul": [dict(M=13, N=37, K=11), dict(M=32, N=24, K=20)],
    "batch_matmul": [dict(B=2, M=13, N=37, K=11), dict(B=3, M=16, N=8, K=12)],
    "conv2d": [
        dict(N=1, C=5, H=9, W=13, K=6, R=3, S=3, stride=2, pad=1),
        dict(N=2, C=4, H=7, W=7, K=8, R=3, S=3, stride=1, pad=1, dilation=2),
        dict(N=1, C=6, H=10, W=10, K=8, R=1, S=1, stride=1, pad=0),
    ],
    "group_conv2d": [
        dict(N=1, C=6, H=9, W=13, K=8, R=3, S=3, stride=2, pad=1, groups=2),
        dict(N=2, C=8, H=7, W=7, K=12, R=3, S=3, stride=1, pad=1, dilation=2, groups=4),
    ],
    "depthwise_conv2d": [
        dict(N=2, C=3, H=13, W=11, R=3, S=3, stride=2, pad=1),
        dict(N=1, C=3, H=16, W=16, R=3, S=3, stride=1, pad=1, multiplier=2),
        dict(N=1, C=4, H=19, W=23, R=3, S=3, stride=1, pad=1),
    ],
}
OPS = tuple(SHAPES)


def target() -> autotune.Target:
    return autotune.Target(f"cuda -arch={ARCH}")


def workloads(op: str) -> Iterator[Workload]:
    """Every (shape, epilogue) pair of ``op``, cycling through the epilogues."""
    for shape in SHAPES[op]:
        for epi in EPILOGUES:
            yield autotune.workload(op, epilogue=epi, **shape)


def sample_valid(wl: Workload, n: int, seed: int = 0) -> list[Config]:
    """``n`` distinct valid configs of ``wl``'s CUDA space (fewer if it has fewer)."""
    sp = driver.config_space(wl, target())
    rng = np.random.default_rng(seed)
    out: dict[int, Config] = {}
    seen: set[int] = set()
    for _ in range(50):
        batch = sp.sample(rng, 4 * n, exclude=seen)
        if not batch:
            break
        for c in batch:
            seen.add(c.index)
            if sp.invalid_reason(c) is None and len(out) < n:
                out[c.index] = c
        if len(out) >= n:
            break
    return list(out.values())


def spread(op: str, total: int, seed: int = 0) -> list[tuple[Workload, Config]]:
    """``total`` valid (workload, config) pairs of ``op``, round-robin over its shapes and
    epilogues (a workload short of valid configs leaves its share to the others)."""
    wls = list(workloads(op))
    per = -(-total // len(wls)) + 4
    pools = [[(wl, c) for c in sample_valid(wl, per, seed + i)] for i, wl in enumerate(wls)]
    out: list[tuple[Workload, Config]] = []
    while len(out) < total and any(pools):
        for pool in pools:
            if pool and len(out) < total:
                out.append(pool.pop(0))
    return out

