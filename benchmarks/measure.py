"""Measurement throughput: trials per minute of the local executor on random configs.

Times matmul 512^3 and conv2d (1x128x28x28, 128 3x3 filters, stride 1, pad 1) on the host
CPU, split into build, run and database time. Prints a table; asserts nothing about times.

    .venv/bin/python benchmarks/measure.py [--batches 2] [--batch-size 32] [--seed 0]
"""
from __future__ import annotations

import argparse
import collections
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np

import autotune
from autotune.driver import config_space
from autotune.measure import LocalExecutor, MeasureInput, MeasureOptions, MeasureResult
from autotune.target import Target


@dataclass
class Row:
    """Totals for one workload."""

    name: str
    trials: int = 0
    ok: int = 0
    build_s: float = 0.0
    run_s: float = 0.0
    db_s: float = 0.0
    total_s: float = 0.0
    best_gflops: float = 0.0
    errors: collections.Counter = field(default_factory=collections.Counter)


def workloads() -> dict[str, Any]:
    return {
        "matmul 512^3": autotune.workload("matmul", M=512, N=512, K=512),
        "conv2d 128x28x28 3x3": autotune.workload(
            "conv2d", N=1, C=128, H=28, W=28, K=128, R=3, S=3, stride=1, pad=1),
    }


def open_db(tmp: Path) -> Optional[Any]:
    """A fresh SQLite tuning database, or None while autotune.db is not there."""
    try:
        from autotune.db import Database
    except ImportError:
        return None
    return Database.open(f"sqlite:///{tmp / 'bench.db'}")


def bench(name: str, wl: Any, ex: LocalExecutor, db: Optional[Any], batches: int,
          batch_size: int, rng: np.random.Generator) -> Row:
    row, seen = Row(name), set()
    sp = config_space(wl, ex.target)
    for _ in range(batches):
        configs = sp.sample(rng, batch_size, exclude=seen)
        seen.update(c.index for c in configs)
        t0 = time.perf_counter()
        results = ex.submit([MeasureInput(wl, ex.target, c) for c in configs])
        t1 = time.perf_counter()
        if db is not None:
            db.add_trials(wl, ex.target, None, list(zip(configs, results)), wl.flops())
        t2 = time.perf_counter()
        stats = ex.last_stats
        row.trials += len(results)
        row.ok += sum(r.ok for r in results)
        row.build_s += stats.build_s if stats else 0.0
        row.run_s += stats.run_s if stats else 0.0
        row.db_s += t2 - t1
        row.total_s += t2 - t0
        row.errors.update(r.error.value for r in results if not r.ok)
        row.best_gflops = max(row.best_gflops, best_gflops(results, wl.flops()))
    return row


def best_gflops(results: list[MeasureResult], flops: int) -> float:
    costs = [r.cost for r in results if r.ok]
    return flops / min(costs) / 1e9 if costs else 0.0


def print_table(rows: list[Row]) -> None:
    head = (f"{'workload':<22}{'trials':>7}{'ok':>5}{'build s':>9}{'run s':>8}{'db s':>7}"
            f"{'total s':>9}{'trials/min':>12}{'best GFLOP/s':>14}  errors")
    print(head)
    print("-" * len(head))
    for r in rows:
        per_min = 60.0 * r.trials / r.total_s if r.total_s else 0.0
        errors = ", ".join(f"{k} {v}" for k, v in sorted(r.errors.items())) or "-"
        print(f"{r.name:<22}{r.trials:>7}{r.ok:>5}{r.build_s:>9.1f}{r.run_s:>8.1f}"
              f"{r.db_s:>7.2f}{r.total_s:>9.1f}{per_min:>12.0f}{r.best_gflops:>14.1f}  {errors}")


def main(argv: Optional[list[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", default="llvm")
    args = p.parse_args(argv)
    target = Target(args.target)
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp, LocalExecutor(target, MeasureOptions()) as ex:
        db = open_db(Path(tmp))
        t0 = time.perf_counter()
        ex.warm_up()
        print(f"target {target.key}; workers started in {time.perf_counter() - t0:.1f} s"
              f"{'' if db else '; no autotune.db: database time not measured'}")
        rows = [bench(name, wl, ex, db, args.batches, args.batch_size, rng)
                for name, wl in workloads().items()]
        if db is not None:
            db.dispose()
    print_table(rows)


if __name__ == "__main__":
    main()
