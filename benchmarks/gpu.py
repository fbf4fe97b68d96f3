"""Kernel quality on a CUDA GPU: tuned GFLOP/s against torch (cuBLAS / cuDNN).

Tunes each workload with the best tuner available (autotune.api.tune), re-checks the best
kernel against numpy, and times torch's equivalent with CUDA events. Prints a table. Needs a
GPU with pycuda (the 'cuda' extra) and nvcc; torch is optional (its column shows n/a).

    .venv/bin/python benchmarks/gpu.py [--trials 500] [--arch sm_90] [--only matmul] [--db URL]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np

import autotune
from autotune.ops import Workload


@dataclass(frozen=True)
class Case:
    label: str
    workload: Workload


def cases() -> list[Case]:
    conv = dict(N=1, R=3, S=3, stride=1, pad=1)
    dw = dict(N=1, C=128, H=56, W=56, R=3, S=3, stride=1, pad=1)
    return [
        Case("matmul 1024^3", autotune.workload("matmul", M=1024, N=1024, K=1024)),
        Case("matmul 4096^3", autotune.workload("matmul", M=4096, N=4096, K=4096)),
        Case("conv2d 128x28x28 k128 3x3",
             autotune.workload("conv2d", C=128, H=28, W=28, K=128, **conv)),
        Case("conv2d 64x56x56 k64 3x3",
             autotune.workload("conv2d", C=64, H=56, W=56, K=64, **conv)),
        Case("depthwise 128x56x56 3x3", autotune.workload("depthwise_conv2d", **dw)),
        Case("depthwise 128x56x56 3x3 +scale_shift+relu",
             autotune.workload("depthwise_conv2d", epilogue=("scale_shift", "relu"), **dw)),
    ]


def gpu_missing() -> Optional[str]:
    """Why this host cannot run the benchmark, or None."""
    from autotune.codegen.cuda.nvcc import find_nvcc
    from autotune.codegen.cuda.runtime import NoCudaDevice, cuda_device
    try:
        cuda_device(0)
    except NoCudaDevice as e:
        return str(e)
    if find_nvcc() is None:
        return "nvcc not found: install the CUDA toolkit or set CUDA_HOME"
    return None


def torch_baseline(wl: Workload, number: int = 50) -> Optional[float]:
    """Seconds per call of torch's equivalent (epilogue included, unfused), or None."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    dev = torch.device("cuda")
    args = [torch.from_numpy(a).to(dev) for a in wl.random_args(0)[:-1]]
    p = wl.params
    if wl.op == "matmul":
        def run() -> Any:
            return args[0] @ args[1]
    else:
        groups = p["C"] if wl.op == "depthwise_conv2d" else 1
        dil = p["dilation"] if "dilation" in p else (1, 1)

        def run() -> Any:
            out = F.conv2d(args[0], args[1], stride=p["stride"], padding=p["pad"],
                           dilation=dil, groups=groups)
            if "scale_shift" in wl.epilogue:
                out = out * args[2].view(1, -1, 1, 1) + args[3].view(1, -1, 1, 1)
            if "relu" in wl.epilogue:
                out = torch.relu(out)
            return out
    return _time_torch(torch, run, number)


def _time_torch(torch: Any, run: Callable[[], Any], number: int) -> float:
    torch.backends.cudnn.benchmark = True  # let cuDNN pick its best algorithm
    for _ in range(3):
        run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    costs = []
    for _ in range(5):
        start.record()
        for _ in range(number):
            run()
        end.record()
        torch.cuda.synchronize()
        costs.append(start.elapsed_time(end) / 1e3 / number)
    return float(np.median(costs))


def bench(case: Case, target: autotune.Target, trials: int, db: str) -> tuple[float, float]:
    """(tuned GFLOP/s, torch GFLOP/s or 0) of one case; the best kernel is re-verified."""
    wl = case.workload
    result = autotune.tune(wl, target, trials=trials, db=db)
    if not result.ok:
        return 0.0, 0.0
    kernel = autotune.compile(wl, target, result.best_config)
    args = wl.random_args(1)
    kernel(*args)
    np.testing.assert_allclose(args[-1], wl.reference(args), rtol=1e-3, atol=1e-3)
    base = torch_baseline(wl)
    flops = wl.flops()
    return flops / result.best_cost / 1e9, (flops / base / 1e9 if base else 0.0)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=500, help="trials per workload")
    ap.add_argument("--arch", default="sm_90", help="CUDA arch of the GPU, e.g. sm_80")
    ap.add_argument("--only", default="", help="run the cases whose label contains this")
    ap.add_argument("--db", default="", help="database URL (default: a temporary SQLite file)")
    args = ap.parse_args(argv)
    reason = gpu_missing()
    if reason:
        print(f"benchmarks/gpu.py needs a CUDA GPU: {reason}", file=sys.stderr)
        return 2
    target = autotune.Target(f"cuda -arch={args.arch}")
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or f"sqlite:///{Path(tmp) / 'gpu_bench.db'}"
        print(f"{'workload':45} {'autotune GFLOP/s':>17} {'torch GFLOP/s':>14} {'ratio':>6}")
        for case in cases():
            if args.only not in case.label:
                continue
            ours, theirs = bench(case, target, args.trials, db)
            ratio = f"{ours / theirs:6.2f}" if theirs else "   n/a"
            torch_col = f"{theirs:14.1f}" if theirs else f"{'n/a':>14}"
            print(f"{case.label:45} {ours:17.1f} {torch_col} {ratio}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
