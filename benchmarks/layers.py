"""Model layers against torch CPU (oneDNN): ResNet-18's 7x7 and strided 3x3 convs, its
512-channel 7x7 conv, its stem max-pool, MobileNet's strided depthwise layers and a
1024-channel depthwise.

Each layer runs as a compiled model runs it: convs prepacked (weight packed once, outside
the timing) with bias+relu fused, depthwise with bias+relu6, the pool alone (torch's
nn.MaxPool2d, NCHW). Per layer: the default config, and the best of a fresh tune of
--trials trials (xgb); then the default, the tuned config and torch (the same op with bias
and the activation, in place) are timed in ROUNDS interleaved rounds, each column its best
round. Prints the ratios and their geomean (the convs and depthwise layers', then every
layer's); asserts nothing.

    .venv/bin/python benchmarks/layers.py [--trials 128] [--only dw]
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Callable

sys.path.insert(0, os.path.dirname(__file__))

from baselines import time_call  # noqa: E402
from kernels import best_of_rounds, tune_best  # noqa: E402
from record_pools import GuardedExecutor  # noqa: E402

import autotune  # noqa: E402
from autotune.measure import LocalExecutor, MeasureOptions  # noqa: E402


def _conv(C: int, H: int, K: int, R: int, stride: int) -> autotune.Workload:
    return autotune.workload("conv2d", N=1, C=C, H=H, W=H, K=K, R=R, S=R, stride=stride,
                             pad=R // 2, epilogue=["bias", "relu"], prepacked=True)


def _dw(C: int, H: int, stride: int) -> autotune.Workload:
    return autotune.workload("depthwise_conv2d", N=1, C=C, H=H, W=H, R=3, S=3, stride=stride,
                             pad=1, epilogue=["bias", "relu6"])


def _pool(C: int, H: int) -> autotune.Workload:
    return autotune.workload("max_pool2d", N=1, C=C, H=H, W=H, R=3, S=3, stride=2, pad=1)


LAYERS = {
    "conv 7x7 s2 3->64 224": _conv(3, 224, 64, 7, 2),
    "conv 3x3 s2 64->128 56": _conv(64, 56, 128, 3, 2),
    "conv 3x3 s2 128->256 28": _conv(128, 28, 256, 3, 2),
    "conv 3x3 512->512 7": _conv(512, 7, 512, 3, 1),
    "maxpool 3x3 s2 64x112": _pool(64, 112),
    "dw s2 96x112": _dw(96, 112, 2),
    "dw s2 144x56": _dw(144, 56, 2),
    "dw 1024x7": _dw(1024, 7, 1),
}


def torch_layer(wl: autotune.Workload) -> Callable[[], object]:
    """torch eager on the same data: conv (grouped for depthwise) with bias, then the
    activation in place; a max-pool alone."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    p = wl.params
    if wl.op == "max_pool2d":
        pool = torch.nn.MaxPool2d((p["R"], p["S"]), p["stride"], p["pad"])
        data = torch.from_numpy(wl.random_args(0)[0])
        return lambda: pool(data)
    x, w, b = (torch.from_numpy(a) for a in wl.random_args(0)[:3])
    if wl.op == "depthwise_conv2d":
        w = w.reshape(p["C"], 1, p["R"], p["S"])
    groups = p["C"] if wl.op == "depthwise_conv2d" else 1
    act = torch.relu_ if "relu" in wl.epilogue else (lambda y: y.clamp_(0.0, 6.0))

    def run() -> object:
        return act(F.conv2d(x, w, b, stride=p["stride"], padding=p["pad"], groups=groups))
    return run


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=128, help="xgb trials per layer (0: defaults)")
    ap.add_argument("--only", default="", help="comma-separated substrings of layer names")
    args = ap.parse_args(argv)
    target = autotune.Target("llvm")
    names = [n for n in LAYERS if not args.only or any(s in n for s in args.only.split(","))]
    rows = []
    with LocalExecutor(target, MeasureOptions()) as local:
        executor = GuardedExecutor(local, target)
        for name in names:
            wl = LAYERS[name]
            configs = [autotune.config_space(wl, target).default()]
            if args.trials:
                configs.append(tune_best(wl, target, args.trials, "xgb", executor)[0])
            torch_fn = torch_layer(wl)
            time_call(torch_fn)
            found, base = best_of_rounds(executor, wl, target, configs, [torch_fn])
            us = [wl.flops() / g / 1e3 if g else float("inf") for g in (*found, *base)]
            rows.append((name, us[0], us[1] if args.trials else None, us[-1]))
            print(f"# {name}: done", file=sys.stderr, flush=True)
    print(f"\nlayers on {target.key}; torch {__import__('torch').__version__} with "
          f"{len(os.sched_getaffinity(0))} threads; tuned = xgb {args.trials} trials; best of "
          f"interleaved rounds, microseconds; speedup = torch / autotune")
    head = (f"{'layer':26s} {'default':>9s} {'tuned':>9s} {'torch':>9s} {'def x':>6s} "
            f"{'tuned x':>7s}")
    print(head)
    print("-" * len(head))
    best: dict[str, float] = {}
    for name, d, t, th in rows:
        ours = min(d, t) if t is not None else d
        best[name] = th / ours
        tuned = f"{t:9.1f}" if t is not None else f"{'-':>9s}"
        tx = f"{th / t:7.2f}" if t is not None else f"{'-':>7s}"
        print(f"{name:26s} {d:9.1f} {tuned} {th:9.1f} {th / d:6.2f} {tx}")
    # the pool's ~70x would swamp the convs' and depthwise layers' geomean: it gets its own
    for label, names in (("convs and depthwise", [n for n in best if "pool" not in n]),
                         ("every layer", list(best))):
        if names:
            ratios = [best[n] for n in names]
            geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
            print(f"geomean speedup of the better of default and tuned, {label}: {geo:.2f}x "
                  f"(min {min(ratios):.2f}x)")


if __name__ == "__main__":
    main()
