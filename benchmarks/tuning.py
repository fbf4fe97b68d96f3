"""Tuner comparison: how fast random, ga, xgb and xgb with transfer find a fast kernel.

Workloads: matmul 512^3, conv2d (N=1, C=K=128, 28x28, 3x3, stride 1, pad 1) and depthwise
(N=1, C=128, 56x56, 3x3, stride 1, pad 1) on this host; matmul 1024^3 float16 on tensor cores
in replay only (``matmul_fp16``: its pool was recorded on an H200, sm_90). "xgb+transfer"
starts from a base model trained on other shapes of the same operator
(benchmarks/data/history_<name>.jsonl.gz, imported into its fresh database); plain xgb runs
with transfer=False.

* ``--real``: real measurement on this host, one seed, each run in a fresh SQLite database:
  best GFLOP/s after 16/32/64/128 trials, and the trials each tuner needs to reach 90% of
  the best GFLOP/s any of them found (first measurements, before the final re-timing).
* ``--replay``: the search restricted to a recorded pool per workload (about 1,000 measured
  random configs, benchmarks/data/<name>.jsonl.gz, made by benchmarks/record_pools.py), over
  ``--seeds`` seeds: medians of the same numbers; the 90% reference is the pool's best.
  A replayed run goes on past ``--trials`` until it reaches 90% (at most the whole pool),
  so its 'to 90%' is a count, not a bound.

Real runs measure a batch again while a sentinel kernel says the machine is busy (see
benchmarks/record_pools.py; ``--no-guard`` to turn that off). Run them on a quiet machine.

Then the ratios of median trials-to-90%: xgb/random (target <= 1/3) and transfer/xgb
(target <= 1/2). ">N": not reached within N trials. Prints tables; asserts nothing.

Every run has the tuner option ``start_default=False``: this compares the strategies
themselves. A job otherwise measures the template's default config first (often within 90%
of the best, which would make every tuner "reach" it at trial 1); benchmarks/kernels.py's
tuned column shows what a job gets.

    .venv/bin/python benchmarks/tuning.py [--real] [--replay] [--seeds 10] [--trials 128]
                                          [--only conv,dw] [--tuners xgb,xgb+transfer]
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional, Sequence

sys.path.insert(0, os.path.dirname(__file__))

from record_pools import DATA, POOLS, GuardedExecutor, runnable  # noqa: E402

import autotune  # noqa: E402
from autotune.db import Database  # noqa: E402
from autotune.measure.replay import ReplayExecutor  # noqa: E402

# label -> (tuner name, transfer)
TUNERS = {"random": ("random", False), "ga": ("ga", False), "xgb": ("xgb", False),
          "xgb+transfer": ("xgb", True)}
CHECKPOINTS = (16, 32, 64, 128)
FRACTION = 0.9  # "reached" = best so far >= FRACTION x the reference
NEVER = math.inf  # trials-to-reach of a run that never reached it
STRATEGY_ONLY = {"start_default": False}  # see the module docstring


# --- what one run's history says ---------------------------------------------------------

def best_at(history: Sequence[tuple[int, float, float]], n: int) -> float:
    """Best GFLOP/s after ``n`` trials (the last one if the run stopped earlier)."""
    if not history:
        return 0.0
    return history[min(n, len(history)) - 1][2]


def trials_to(history: Sequence[tuple[int, float, float]], threshold: float) -> float:
    """The first trial whose best-so-far reaches ``threshold`` (NEVER: not reached)."""
    for trial, _, best in history:
        if best >= threshold > 0:
            return trial
    return NEVER


def random_median(pool: int, good: int) -> float:
    """Median trials until random search, drawing ``pool`` configs without replacement,
    meets one of ``good``: the least t with P(T <= t) >= 1/2, where
    P(T > t) = prod_{i<t} (pool - good - i) / (pool - i)."""
    if good <= 0:
        return NEVER
    miss = 1.0
    for t in range(1, pool + 1):
        miss *= (pool - good - (t - 1)) / (pool - (t - 1))
        if miss <= 0.5:
            return float(t)
    return float(pool)


def checkpoints(trials: int) -> list[int]:
    points = [c for c in CHECKPOINTS if c <= trials]
    return points if points and points[-1] == trials else points + [trials]


# --- formatting ----------------------------------------------------------------------------

def fmt_trials(x: float, budget: int) -> str:
    return f">{budget}" if x == NEVER or x > budget else f"{x:g}"


def fmt_ratio(num: float, den: float, budget: int) -> str:
    """``num/den`` of trials-to-90%; a bound when one side never reached it."""
    if num == NEVER and den == NEVER:
        return "-"
    if den == NEVER:
        return f"<{num / budget:.2f}"  # den > budget
    if num == NEVER:
        return f">{budget / den:.2f}"
    return f"{num / den:.2f}"


def verdict(num: float, den: float, budget: int, target: float) -> str:
    if num == NEVER and den == NEVER:
        return "n/a"
    if den == NEVER:
        return "met" if num / budget <= target else "(bound)"
    if num == NEVER:
        return "missed"
    return "met" if num / den <= target else "missed"


def print_table(title: str, rows: list[tuple[str, str, list[float], float, str]],
                points: list[int], budget: int, extra_head: str) -> None:
    print(f"\n{title}\n")
    w = max([10, *(len(r[0]) for r in rows)])
    head = (f"{'workload':{w}s} {'tuner':13s} "
            + " ".join(f"{'@' + str(p):>7s}" for p in points)
            + f" {'to 90%':>7s} {extra_head:>12s}")
    print(head)
    print("-" * len(head))
    last = None
    for name, label, bests, to90, extra in rows:
        shown = name if name != last else ""
        last = name
        print(f"{shown:{w}s} {label:13s} " + " ".join(f"{b:7.1f}" for b in bests)
              + f" {fmt_trials(to90, budget):>7s} {extra:>12s}")


def print_ratios(title: str, to90: dict[tuple[str, str], float], names: list[str],
                 labels: list[str], budget: int,
                 expected: Optional[dict[str, float]] = None) -> None:
    """``expected``: the exact median of random search's trials to 90% per workload (replay),
    for a third column: ten seeds of random search give a noisy median."""
    pairs = [(num, den, target) for num, den, target in
             (("xgb", "random", 1 / 3), ("xgb+transfer", "xgb", 1 / 2))
             if num in labels and den in labels]
    if not pairs:
        return
    print(f"\n{title}\n")
    w = max([10, *(len(n) for n in names)])
    head = f"{'workload':{w}s} " + " ".join(f"{num + '/' + den:>20s} {'':6s}"
                                           for num, den, _ in pairs)
    with_expected = expected is not None and "xgb" in labels
    if with_expected:
        head += f" {'xgb/median[random]':>19s}"
    print(head)
    print("-" * len(head))
    for name in names:
        cells = []
        for num, den, target in pairs:
            a, b = to90.get((name, num)), to90.get((name, den))
            if a is None or b is None:
                cells.append(f"{'-':>20s} {'':6s}")
                continue
            cells.append(f"{fmt_ratio(a, b, budget):>20s} "
                         f"{verdict(a, b, budget, target):6s}")
        line = f"{name:{w}s} " + " ".join(cells)
        if with_expected and (name, "xgb") in to90 and name in expected:
            line += f" {fmt_ratio(to90[(name, 'xgb')], expected[name], budget):>19s}"
        print(line)
    print("targets: xgb/random <= 0.33, xgb+transfer/xgb <= 0.50; '(bound)': one side never "
          "reached 90% in the median, so only a bound on the ratio is known")
    if with_expected:
        print("median[random]: the exact median trials to 90% of random search drawing from "
              "the pool without replacement (see random_median)")


# --- databases -----------------------------------------------------------------------------

def history_file(data: Path, name: str) -> Path:
    return data / f"history_{name}.jsonl.gz"


def make_db(path: Path, history: Optional[Path]) -> str:
    """A migrated SQLite database at ``path``, with ``history`` imported; its URL."""
    url = f"sqlite:///{path}"
    db = Database.open(url)
    try:
        if history is not None:
            db.import_jsonl_path(history)
    finally:
        db.dispose()
    return url


# --- real measurement ----------------------------------------------------------------------

def run_real(args: argparse.Namespace, names: list[str], labels: list[str]) -> None:
    from autotune.measure import LocalExecutor, MeasureOptions

    target = autotune.Target("llvm")
    points = checkpoints(args.trials)
    rows, to90, notes = [], {}, []
    names = [n for n in names if n in runnable(target)]  # the GPU's pools replay only
    with LocalExecutor(target, MeasureOptions()) as local, \
            tempfile.TemporaryDirectory() as tmp:
        executor = local if args.no_guard else GuardedExecutor(local, target)
        for name in names:
            wl = POOLS[name]
            runs = {}
            for label in labels:
                tuner, transfer = TUNERS[label]
                hist = history_file(args.data, name) if transfer else None
                if hist is not None and not hist.exists():
                    print(f"# {name} {label}: no {hist}; skipped", file=sys.stderr)
                    continue
                url = make_db(Path(tmp) / f"{name}-{label}.db", hist)
                t0 = time.perf_counter()
                res = autotune.tune(wl, target, trials=args.trials, tuner=tuner, seed=args.seed,
                                    db=url, executor=executor, transfer=transfer,
                                    tuner_options=STRATEGY_ONLY)
                minutes = (time.perf_counter() - t0) / 60
                runs[label] = (res.history, minutes)
                print(f"# {name} {label}: best {best_at(res.history, args.trials):.1f} GFLOP/s "
                      f"in {minutes:.1f} min", file=sys.stderr, flush=True)
            ref = max((best_at(h, args.trials) for h, _ in runs.values()), default=0.0)
            for label, (hist, minutes) in runs.items():
                to90[(name, label)] = trials_to(hist, FRACTION * ref)
                rows.append((name, label, [best_at(hist, p) for p in points],
                             to90[(name, label)], f"{minutes:.1f}"))
            notes.append(f"{name}: reference (best any tuner found) {ref:.1f} GFLOP/s")
    retried = "" if args.no_guard else f", {executor.retries} batches measured again"
    title = (f"real measurement on {target.key} ({os.cpu_count()} cores{retried}), "
             f"seed {args.seed}: "
             f"best GFLOP/s after N trials; 'to 90%': trials to reach 90% of the best any "
             f"tuner found (reference)")
    print_table(title, rows, points, args.trials, "min")
    for note in notes:
        print("  " + note)
    print_ratios(f"real: ratio of trials to 90% (seed {args.seed})", to90,
                 [n for n in names if any(k[0] == n for k in to90)], labels, args.trials)


# --- replay --------------------------------------------------------------------------------

def read_pool(path: Path, wl: Any) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as fp:
        records = [json.loads(line) for line in fp if line.strip()]
    key = wl.key
    return [r for r in records if autotune.Workload.from_dict(r["workload"]).key == key]


def pool_best(wl: Any, records: list[dict[str, Any]]) -> tuple[float, list[float]]:
    """The pool's best GFLOP/s and every valid record's GFLOP/s (median of its repeats)."""
    flops = wl.flops()
    gf = [flops / statistics.median(r["costs"]) / 1e9 for r in records
          if r.get("error", "none") == "none" and r.get("costs")]
    return max(gf, default=0.0), gf


def run_replay(args: argparse.Namespace, names: list[str], labels: list[str]) -> None:
    points = checkpoints(args.trials)
    seeds = list(range(args.seed, args.seed + args.seeds))
    rows, to90, notes, expected = [], {}, [], {}
    limit = args.trials  # the longest run allowed: the largest pool
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            wl = POOLS[name]
            path = args.data / f"{name}.jsonl.gz"
            if not path.exists():
                print(f"# {name}: no pool {path} (run benchmarks/record_pools.py); skipped",
                      file=sys.stderr)
                continue
            records = read_pool(path, wl)
            limit = max(limit, len(records))
            targets = {r["target"] for r in records}
            if len(targets) != 1:
                raise SystemExit(f"{path}: expected one target, found {sorted(targets)}")
            # the recorded target: config indices are positions in that target's space
            target = autotune.Target(targets.pop())
            executor = ReplayExecutor(records)
            ref, gf = pool_best(wl, records)
            good = sum(1 for g in gf if g >= FRACTION * ref)
            expected[name] = random_median(len(records), good)
            notes.append(f"{name}: pool {len(records)} configs ({len(gf)} valid), best "
                         f"{ref:.1f} GFLOP/s, {good} configs >= 90% of it (median[random] "
                         f"{expected[name]:g} trials); {path.name} on {target.key}")
            template = None
            for label in labels:
                tuner, transfer = TUNERS[label]
                if transfer:
                    hist = history_file(args.data, name)
                    if not hist.exists():
                        print(f"# {name} {label}: no {hist}; skipped", file=sys.stderr)
                        continue
                    if template is None:
                        template = Path(tmp) / f"history-{name}.db"
                        make_db(template, hist)
                bests, reach, t0 = [], [], time.perf_counter()
                threshold = FRACTION * ref

                def until_reached(p: Any) -> bool:
                    # past the table's checkpoints, run only until 90% is reached
                    return p.trials_done < args.trials or p.best_gflops < threshold

                for seed in seeds:
                    db = None
                    if transfer:
                        # a fresh copy per run: this workload has no record in it, so the
                        # loop measures (replays) every config anew
                        run_db = Path(tmp) / f"run-{name}-{seed}.db"
                        shutil.copyfile(template, run_db)
                        db = f"sqlite:///{run_db}"
                    res = autotune.tune(wl, target, trials=len(records), tuner=tuner,
                                        seed=seed, db=db, executor=executor,
                                        transfer=transfer, callbacks=[until_reached],
                                        tuner_options=STRATEGY_ONLY)
                    if db is not None:
                        run_db.unlink()
                    bests.append([best_at(res.history, p) for p in points])
                    reach.append(trials_to(res.history, threshold))
                minutes = (time.perf_counter() - t0) / 60
                med = statistics.median(reach)
                to90[(name, label)] = med
                n_reached = sum(1 for r in reach if r != NEVER)
                rows.append((name, label, [statistics.median(col) for col in zip(*bests)], med,
                             f"{n_reached}/{len(seeds)} {minutes:4.1f}"))
                print(f"# {name} {label}: median to 90% {fmt_trials(med, limit)}, "
                      f"{minutes:.1f} min", file=sys.stderr, flush=True)
    title = (f"replay over {len(seeds)} seeds: median best GFLOP/s after N trials; 'to 90%': "
             f"median trials to reach 90% of the pool's best; 'reached': seeds that did")
    print_table(title, rows, points, limit, "reached  min")
    for note in notes:
        print("  " + note)
    print_ratios(f"replay: ratio of median trials to 90% ({len(seeds)} seeds)", to90,
                 [n for n in names if any(k[0] == n for k in to90)], labels, limit, expected)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real", action="store_true", help="real measurement (default: both)")
    ap.add_argument("--replay", action="store_true", help="replay mode (default: both)")
    ap.add_argument("--seeds", type=int, default=10, help="replay seeds")
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--only", default="", help="comma-separated substrings of workload names "
                    f"({', '.join(POOLS)})")
    ap.add_argument("--tuners", default=",".join(TUNERS),
                    help=f"comma-separated subset of {', '.join(TUNERS)}")
    ap.add_argument("--no-guard", action="store_true",
                    help="real: no busy-machine sentinel around each batch")
    ap.add_argument("--data", type=Path, default=DATA, help="folder of the recorded pools")
    args = ap.parse_args(argv)
    names = [n for n in POOLS if not args.only or any(s in n for s in args.only.split(","))]
    labels = [t for t in args.tuners.split(",") if t]
    unknown = [t for t in labels if t not in TUNERS]
    if unknown:
        ap.error(f"unknown tuners {unknown}; known: {', '.join(TUNERS)}")
    both = not args.real and not args.replay
    if args.replay or both:
        run_replay(args, names, labels)
    if args.real or both:
        run_real(args, names, labels)


if __name__ == "__main__":
    main()
