"""Per layer, NCHW against channel-blocked NCHW<lanes>c: ResNet-18's 3x3 convs (the
prepacked forms a compiled model runs, bias and relu fused), each form at its default
config and, with --trials > 0, at the best of a fresh tune of that many trials.

In ROUNDS interleaved rounds every (layer, form, config) is timed; each column shows its
best round. "transform" is torch's permute-copy of the layer's input into the blocked
layout (what a blocked chain pays where it starts), timed the same way. Then the whole
ResNet-18 compiled with `layout="nchw"` and `layout="auto"` at default configs (no
records), against torch eager, in interleaved rounds (best round's median). Prints tables;
asserts nothing. The host may be shared: the load average is printed.

    .venv/bin/python benchmarks/layouts.py [--trials 8] [--tuner xgb] [--target llvm]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from dataclasses import replace

import torch

import autotune
from autotune.driver import config_space
from autotune.frontend.layouts import LayoutTransform, transforms
from autotune.frontend.runtime import compile_model, kernel_modules
from autotune.measure import LocalExecutor, MeasureInput, MeasureOptions
from autotune.ops.layout import blocked

sys.path.insert(0, os.path.dirname(__file__))
from models import interleaved, resnet18  # noqa: E402

ROUNDS = 5
# (C, K, H, stride) of ResNet-18's 3x3 convs at 224x224, batch 1
LAYERS = [(64, 64, 56, 1), (64, 128, 56, 2), (128, 128, 28, 1), (128, 256, 28, 2),
          (256, 256, 14, 1), (256, 512, 14, 2), (512, 512, 7, 1)]
OPTIONS = MeasureOptions(repeat=3, min_repeat_ms=10)


def tuned(wl: autotune.Workload, target: autotune.Target, trials: int, tuner: str,
          executor: LocalExecutor) -> autotune.Config:
    """The best config of a fresh tune of ``wl`` (its own throw-away database)."""
    with tempfile.TemporaryDirectory() as tmp:
        return autotune.tune(wl, target, trials=trials, tuner=tuner, seed=0, transfer=False,
                             db=f"sqlite:///{tmp}/bench.db", executor=executor).best_config


def transform_seconds(c: int, h: int, block: int) -> float:
    x = torch.rand(1, c, h, h)
    step = LayoutTransform(1, block)
    best = float("inf")
    for _ in range(ROUNDS * 10):
        start = time.perf_counter()
        step(x)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=8,
                    help="trials per form and layer (default 8; 0: default configs only)")
    ap.add_argument("--tuner", default="xgb", help="tuner (default xgb)")
    ap.add_argument("--target", default="llvm",
                    help="target spec (default llvm; 'llvm -cores=1' times one thread)")
    ap.add_argument("--layers", type=int, default=len(LAYERS),
                    help=f"the first N layers only (default all {len(LAYERS)})")
    ap.add_argument("--no-model", action="store_true", help="skip the whole-model table")
    args = ap.parse_args(argv)
    target = autotune.Target(args.target)
    block = target.vector_lanes
    torch.set_num_threads(target.cores)
    rows = []
    with LocalExecutor(target, OPTIONS) as executor:
        for c, k, h, stride in LAYERS[:args.layers]:
            plain = autotune.workload("conv2d", N=1, C=c, H=h, W=h, K=k, R=3, S=3,
                                      stride=stride, pad=1, epilogue=["bias", "relu"],
                                      prepacked=True)
            forms = [plain, replace(plain, layout=blocked(block))]
            inputs = [MeasureInput(wl, target, config_space(wl, target).default())
                      for wl in forms]
            if args.trials:
                inputs += [MeasureInput(wl, target, tuned(wl, target, args.trials, args.tuner,
                                                          executor)) for wl in forms]
            best = [float("inf")] * len(inputs)
            for _ in range(ROUNDS):
                results = executor.submit(inputs)
                best = [min(b, r.cost) if r.ok else b for b, r in zip(best, results)]
            rows.append((f"{c}->{k} {h}x{h} s{stride}", best, transform_seconds(c, h, block)))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nResNet-18 3x3 convs (prepacked, bias+relu) on {target.key} (load average {load}); "
          f"NCHW vs {blocked(block)}; default configs"
          + (f" and {args.trials} trials ({args.tuner}) per form" if args.trials else "")
          + f"; best of {ROUNDS} interleaved rounds, microseconds")
    cols = ["nchw dflt", "blk dflt"] + (["nchw tuned", "blk tuned"] if args.trials else [])
    head = f"{'layer':20s} " + " ".join(f"{col:>10s}" for col in cols) + \
        f" {'blk/nchw':>8s} {'transform':>9s}"
    print(head)
    print("-" * len(head))
    for name, best, move in rows:
        ratio = min(best[1::2]) / min(best[0::2])  # best blocked over best NCHW
        print(f"{name:20s} " + " ".join(f"{b * 1e6:10.1f}" for b in best)
              + f" {ratio:8.2f} {move * 1e6:9.1f}")
    if not args.no_model:
        whole_model(target)


def whole_model(target: autotune.Target) -> None:
    """ResNet-18 compiled both ways at default configs, and torch, interleaved."""
    model, inputs = resnet18()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no records: default configs, as intended
        compiled = {layout: compile_model(model, inputs, target=target, db=None,
                                          layout=layout) for layout in ("nchw", "auto")}
    auto = compiled["auto"]
    blocked_layers = sum(m.workload.layout != "NCHW" for m in kernel_modules(auto))
    with torch.no_grad():
        want = model(*inputs)
        error = max((c(*inputs) - want).abs().max().item() for c in compiled.values())
        times = interleaved({"torch": lambda: model(*inputs),
                             **{k: (lambda c=c: c(*inputs)) for k, c in compiled.items()}},
                            ROUNDS, 20)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nResNet-18, batch 1, default configs, on {target.key} (load average {load}): "
          f"auto runs {blocked_layers} of {len(kernel_modules(auto))} kernels blocked with "
          f"{len(transforms(auto))} transforms; max |error| vs torch {error:.1e}; best "
          f"round's median of 20 calls, ms")
    print("  ".join(f"{name} {min(t) * 1e3:.2f}" for name, t in times.items()))


if __name__ == "__main__":
    main()
