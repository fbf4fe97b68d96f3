"""Baseline implementations the benchmarks compare against: numpy (OpenBLAS) and torch CPU."""
from __future__ import annotations

import statistics
import time
from typing import Callable, Optional

import numpy as np

from autotune.ops import Workload


def time_call(fn: Callable[[], object], min_repeat_s: float = 0.05, repeat: int = 5) -> float:
    """Median seconds per call: warm-up, grow the call count to ``min_repeat_s``, repeat."""
    fn()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        t = time.perf_counter() - t0
        if t >= min_repeat_s:
            break
        number *= 2
    costs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        costs.append((time.perf_counter() - t0) / number)
    return statistics.median(costs)


def numpy_baseline(wl: Workload, args: list[np.ndarray]) -> tuple[str, Callable[[], object]]:
    """numpy's best way to compute the main op (no epilogue): GEMM, im2col + GEMM, strided sums."""
    p = wl.params
    if wl.op == "matmul":
        a, b = args[0], args[1]
        return "numpy matmul", lambda: a @ b
    if wl.op == "batch_matmul":
        a, b = args[0], args[1]
        return "numpy matmul", lambda: np.matmul(a, b)
    data, weight = args[0], args[1]
    (sh, sw), (ph, pw) = p["stride"], p["pad"]
    R, S = p["R"], p["S"]
    oh, ow = wl.out_h, wl.out_w
    if wl.op == "conv2d":
        dh, dw = p["dilation"]
        wmat = weight.reshape(p["K"], -1)

        def im2col_gemm():
            x = np.pad(data, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
            n, c = x.shape[:2]
            cols = np.empty((n, c, R, S, oh, ow), dtype=np.float32)
            for r in range(R):
                for s in range(S):
                    cols[:, :, r, s] = x[:, :, r * dh:r * dh + sh * oh:sh,
                                         s * dw:s * dw + sw * ow:sw]
            return np.einsum("kq,nqp->nkp", wmat, cols.reshape(n, c * R * S, oh * ow),
                             optimize=True)
        return "numpy im2col+GEMM", im2col_gemm
    m = p["multiplier"]

    def strided():
        x = np.pad(data, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
        x = np.repeat(x, m, axis=1) if m > 1 else x
        out = np.zeros((x.shape[0], x.shape[1], oh, ow), dtype=np.float32)
        for r in range(R):
            for s in range(S):
                out += (x[:, :, r:r + sh * oh:sh, s:s + sw * ow:sw]
                        * weight[None, :, 0, r, s, None, None])
        return out
    return "numpy strided", strided


def torch_baseline(wl: Workload, args: list[np.ndarray]) -> Optional[Callable[[], object]]:
    """torch CPU (oneDNN) for the main op, or None when torch is not installed."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    torch.set_num_threads(len(__import__("os").sched_getaffinity(0)))
    p = wl.params
    t = [torch.from_numpy(a) for a in args[:2]]
    if wl.op in ("matmul", "batch_matmul"):
        return lambda: torch.matmul(t[0], t[1])
    stride, pad = p["stride"], p["pad"]
    if wl.op == "conv2d":
        return lambda: F.conv2d(t[0], t[1], stride=stride, padding=pad, dilation=p["dilation"])
    return lambda: F.conv2d(t[0], t[1], stride=stride, padding=pad, groups=p["C"])
