"""Record the replay pools of benchmarks/tuning.py: random configs measured once, kept as data.

Per benchmark workload (matmul 512^3, conv2d 128x28x28 3x3, depthwise 128x56x56 3x3),
random configs are measured on this host until ``--pool`` of them are valid (failures stay
in the pool: a replayed tuner meets them as often as a real one would); per operator, two
other shapes get ``--history`` valid configs each, the transfer history of ``xgb+transfer``.
Records go to a SQLite database (``--db``; a re-run resumes from it) and are exported as
gzip JSON lines: benchmarks/data/<name>.jsonl.gz and history_<name>.jsonl.gz.

The pools a target cannot run are skipped: the float16 pool (``matmul_fp16``, tensor
cores) is recorded on a GPU, ``--target "cuda -arch=sm_90"``, and replayed anywhere.

    .venv/bin/python benchmarks/record_pools.py [--pool 1000] [--history 300] [--only conv]
                                                [--db /tmp/pools.db] [--out benchmarks/data]
                                                [--target llvm]

A faster timing protocol than the default (3 repeats of at least 5 ms) keeps the run at
about half an hour on 2 cores.

Another busy process does not just add noise: libgomp's spinning threads then lose the
CPU for whole scheduler ticks, and a parallel kernel measures 2-10x slower (the same config
at 17 or 320 GFLOP/s). So every batch is bracketed by a sentinel kernel (`GuardedExecutor`)
and measured again, after a pause, while the sentinel is below 75% of its best.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))

import autotune  # noqa: E402
from autotune.db import Database  # noqa: E402
from autotune.measure import Executor, LocalExecutor, MeasureInput, MeasureOptions  # noqa: E402
from autotune.ops.workload import WorkloadError  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"

# name -> workload: the benchmark's workloads; each op's other shapes are its history.
POOLS = {
    "matmul": autotune.workload("matmul", M=512, N=512, K=512),
    "conv2d": autotune.workload("conv2d", N=1, C=128, H=28, W=28, K=128, R=3, S=3,
                                stride=1, pad=1),
    "depthwise": autotune.workload("depthwise_conv2d", N=1, C=128, H=56, W=56, R=3, S=3,
                                   stride=1, pad=1),
    # tensor cores: recorded on a GPU (--target "cuda -arch=sm_90"), replayed anywhere
    "matmul_fp16": autotune.workload("matmul", M=1024, N=1024, K=1024, dtype="float16"),
}
HISTORY = {
    "matmul": [autotune.workload("matmul", M=256, N=256, K=256),
               autotune.workload("matmul", M=384, N=640, K=320)],
    "conv2d": [autotune.workload("conv2d", N=1, C=64, H=56, W=56, K=64, R=3, S=3,
                                 stride=1, pad=1),
               autotune.workload("conv2d", N=1, C=256, H=14, W=14, K=256, R=3, S=3,
                                 stride=1, pad=1)],
    "depthwise": [autotune.workload("depthwise_conv2d", N=1, C=64, H=112, W=112, R=3, S=3,
                                    stride=1, pad=1),
                  autotune.workload("depthwise_conv2d", N=1, C=256, H=28, W=28, R=3, S=3,
                                    stride=1, pad=1)],
    "matmul_fp16": [autotune.workload("matmul", M=512, N=512, K=512, dtype="float16"),
                    autotune.workload("matmul", M=2048, N=1024, K=512, dtype="float16")],
}
OPTIONS = MeasureOptions(repeat=3, min_repeat_ms=5)
BATCH = 32


class GuardedExecutor(Executor):
    """An executor measuring each batch again while the machine is busy.

    Before and after each batch it times a sentinel (matmul 256^3, default config, ~0.1 s);
    the batch stands when both reach ``quiet`` x the best sentinel seen, else it is measured
    again after ``pause`` seconds, at most ``tries`` times (then kept, marked "contended").
    """

    def __init__(self, inner: Any, target: Any, *, quiet: float = 0.75, pause: float = 20.0,
                 tries: int = 60) -> None:
        self.inner, self.quiet, self.pause, self.tries = inner, quiet, pause, tries
        wl = autotune.workload("matmul", M=256, N=256, K=256)
        self._probe_input = MeasureInput(wl, target, autotune.config_space(wl, target).default())
        self.best = 0.0
        self.retries = 0
        for _ in range(3):  # the runner's first kernels run slow
            self._probe()

    def _probe(self) -> float:
        (res,) = self.inner.submit([self._probe_input])
        g = self._probe_input.workload.flops() / res.cost / 1e9 if res.ok else 0.0
        self.best = max(self.best, g)
        return g

    def submit(self, inputs: Sequence[MeasureInput]) -> list[Any]:
        for attempt in range(self.tries):
            before = self._probe()
            results = self.inner.submit(inputs)
            after = self._probe()
            if min(before, after) >= self.quiet * self.best:
                return results
            self.retries += 1
            print(f"# busy machine: sentinel {before:.0f}/{after:.0f} of {self.best:.0f} "
                  f"GFLOP/s; batch of {len(inputs)} again in {self.pause:g}s",
                  file=sys.stderr, flush=True)
            time.sleep(self.pause)
        return [dataclasses.replace(r, extra={**r.extra, "contended": True}) for r in results]

    def close(self) -> None:
        self.inner.close()


def runnable(target: Any) -> list[str]:
    """The pools whose workloads ``target`` can run (a CPU refuses half dtypes)."""
    names = []
    for name, wl in POOLS.items():
        try:
            wl.check_target(target)
        except WorkloadError:
            continue
        names.append(name)
    return names


def record(db: Database, executor: Any, wl, target, valid: int, seed: int,
           label: str) -> tuple[int, int, float]:
    """Measure random configs of ``wl`` until ``valid`` are valid (resuming from ``db``).

    Gives up after 3x ``valid`` measurements (a space mostly failing). Returns (measured,
    valid, best GFLOP/s).
    """
    space = autotune.config_space(wl, target)
    rng = np.random.default_rng(seed)
    prior = db.trials_for(wl, target)
    seen = {r.config_index for r in prior}
    n_ok = sum(1 for r in prior if r.error == "none")
    best = max((r.gflops or 0.0 for r in prior if r.error == "none"), default=0.0)
    t0 = time.perf_counter()
    while n_ok < valid and len(seen) < 3 * valid:
        want = min(BATCH, valid - n_ok + 2)
        configs = space.sample(rng, want, exclude=seen)
        if not configs:
            break  # the space is exhausted
        seen.update(c.index for c in configs)
        results = executor.submit([MeasureInput(wl, target, c) for c in configs])
        db.add_trials(wl, target, None, list(zip(configs, results)), int(wl.flops()))
        for res in results:
            if res.ok:
                n_ok += 1
                best = max(best, wl.flops() / res.cost / 1e9)
        print(f"# {label}: {len(seen)} measured, {n_ok} valid, best {best:.1f} GFLOP/s, "
              f"{time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    return len(seen), n_ok, best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pool", type=int, default=1000, help="valid configs per benchmark pool")
    ap.add_argument("--history", type=int, default=300,
                    help="valid configs per history shape (0: no history files)")
    ap.add_argument("--only", default="", help="comma-separated substrings of pool names")
    ap.add_argument("--db", default="", help="SQLite file of the records, kept so that a "
                    "re-run resumes (default: autotune-pools.db in the temp dir)")
    ap.add_argument("--out", default=str(DATA), help="folder of the .jsonl.gz files")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", default="llvm",
                    help='target to record on, e.g. "cuda -arch=sm_90" (default: llvm)')
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    db_path = Path(args.db or Path(tempfile.gettempdir()) / "autotune-pools.db")
    target = autotune.Target(args.target)
    names = [n for n in runnable(target)
             if not args.only or any(s in n for s in args.only.split(","))]
    db = Database.open(f"sqlite:///{db_path}")
    print(f"# recording into {db_path} on {target.key}", file=sys.stderr, flush=True)
    rows = []
    try:
        with LocalExecutor(target, OPTIONS) as local:
            # a busy CPU slows parallel CPU kernels (see above); a GPU kernel runs alone
            executor = GuardedExecutor(local, target) if target.kind == "llvm" else local
            for name in names:
                wl = POOLS[name]
                n, ok, best = record(db, executor, wl, target, args.pool, args.seed, name)
                path = out / f"{name}.jsonl.gz"
                db.export_jsonl_path(path, workload=wl, target=target)
                rows.append((name, wl, n, ok, best, path))
                if args.history > 0:
                    for i, hwl in enumerate(HISTORY[name]):
                        label = f"history_{name}[{i}]"
                        n, ok, best = record(db, executor, hwl, target, args.history,
                                             args.seed + 1 + i, label)
                        rows.append((label, hwl, n, ok, best, out / f"history_{name}.jsonl.gz"))
                    hpath = out / f"history_{name}.jsonl.gz"
                    _export_many(db, HISTORY[name], target, hpath)
    finally:
        db.dispose()
    retries = getattr(executor, "retries", 0)
    print(f"\nreplay pools on {target.key} (repeat={OPTIONS.repeat}, "
          f"min_repeat_ms={OPTIONS.min_repeat_ms:g}; {retries} batches measured "
          f"again on a busy machine)\n")
    head = f"{'pool':22s} {'workload':66s} {'measured':>8s} {'valid':>6s} {'best':>7s}  file"
    print(head)
    print("-" * len(head))
    for label, wl, n, ok, best, path in rows:
        size = f"{path.stat().st_size / 1024:.0f} KiB" if path.exists() else "-"
        print(f"{label:22s} {_short(wl):66s} {n:8d} {ok:6d} {best:7.1f}  {path.name} ({size})")


def _export_many(db: Database, workloads, target, path: Path) -> int:
    """Export several workloads' records into one gzip JSON-lines file."""
    import gzip

    count = 0
    with gzip.open(path, "wt", encoding="utf-8") as fp:
        for wl in workloads:
            count += db.export_jsonl(fp, workload=wl, target=target)
    return count


def _short(wl) -> str:
    def fmt(v):
        return "x".join(map(str, v)) if isinstance(v, tuple) else str(v)
    params = ",".join(f"{k}={fmt(v)}" for k, v in wl.params.items()
                      if k not in ("dilation", "multiplier"))
    return f"{wl.op}({params})"

if __name__ == "__main__":
    main()
