"""Tuning the kernel a compiled model runs: a layer with a constant weight tuned with its
weight packed inside every timed call (the usual form) against tuned as `compile_model` runs
it, the weight packed beforehand (the prepacked form), at the same trial budget.

Per layer, each form is tuned in its own fresh database; then, in ROUNDS interleaved rounds,
the usual form's best config timed with packing inside ("inside"), the same config timed
prepacked (what a model ran when tuned the usual way: "inside->pre"), and the prepacked
form's best ("prepacked"), each column showing its best round. Prints a table; asserts
nothing. Layers: ResNet-18's last 3x3 conv (512->512, 7x7: a 9.4 MB weight) and a 3x3
conv of its layer3 (256->256, 14x14: 2.4 MB).

    .venv/bin/python benchmarks/prepack.py [--trials 16] [--tuner xgb] [--target llvm]
"""
from __future__ import annotations

import argparse
import os
import tempfile
from dataclasses import replace

import autotune
from autotune.measure import LocalExecutor, MeasureInput, MeasureOptions

ROUNDS = 5
LAYERS = {
    "conv 512->512 7x7 3x3": autotune.workload("conv2d", N=1, C=512, H=7, W=7, K=512, R=3,
                                               S=3, stride=1, pad=1,
                                               epilogue=["bias", "residual", "relu"]),
    "conv 256->256 14x14 3x3": autotune.workload("conv2d", N=1, C=256, H=14, W=14, K=256,
                                                 R=3, S=3, stride=1, pad=1,
                                                 epilogue=["bias", "relu"]),
}
OPTIONS = MeasureOptions(repeat=3, min_repeat_ms=10)


def tuned(wl: autotune.Workload, target: autotune.Target, trials: int, tuner: str,
          executor: LocalExecutor) -> autotune.Config:
    """The best config of a fresh tune of ``wl`` (its own throw-away database)."""
    with tempfile.TemporaryDirectory() as tmp:
        return autotune.tune(wl, target, trials=trials, tuner=tuner, seed=0, transfer=False,
                             db=f"sqlite:///{tmp}/bench.db", executor=executor).best_config


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=16, help="trials per form (default 16)")
    ap.add_argument("--tuner", default="xgb", help="tuner (default xgb)")
    ap.add_argument("--target", default="llvm",
                    help="target spec (default llvm; 'llvm -cores=1' times one thread, "
                         "steadier on a shared host)")
    args = ap.parse_args(argv)
    target = autotune.Target(args.target)
    rows = []
    with LocalExecutor(target, OPTIONS) as executor:
        for name, usual in LAYERS.items():
            packed = replace(usual, prepacked=True)
            inside_cfg = tuned(usual, target, args.trials, args.tuner, executor)
            packed_cfg = tuned(packed, target, args.trials, args.tuner, executor)
            inputs = [MeasureInput(usual, target, inside_cfg),
                      MeasureInput(packed, target, inside_cfg),
                      MeasureInput(packed, target, packed_cfg)]
            best = [float("inf")] * len(inputs)
            for _ in range(ROUNDS):
                results = executor.submit(inputs)
                best = [min(b, r.cost) if r.ok else b for b, r in zip(best, results)]
            rows.append((name, usual.flops(), best, inside_cfg.index == packed_cfg.index))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\ntuned at {args.trials} trials ({args.tuner}) per form on {target.key} (load "
          f"average {load}); best of {ROUNDS} interleaved rounds, microseconds")
    head = (f"{'layer':24s} {'inside':>9s} {'inside->pre':>11s} {'prepacked':>9s} "
            f"{'pre/inside':>10s} {'same config':>11s}")
    print(head)
    print("-" * len(head))
    for name, _, (inside, moved, pre), same in rows:
        print(f"{name:24s} {inside * 1e6:9.1f} {moved * 1e6:11.1f} {pre * 1e6:9.1f} "
              f"{pre / inside:10.2f} {'yes' if same else 'no':>11s}")


if __name__ == "__main__":
    main()
