"""Measurement on a Ray cluster: scaling, dispatch overhead, recovery, and timing fidelity.

Starts a Ray head and `autotune worker` nodes on this machine and prints four tables:

1. trials per minute with 1, 2 and 4 synthetic workers that take 0.1 / 0.5 / 2 s per trial
   (a random search through `tune_loop`, batches of at least 2W), and scaling efficiency;
2. dispatch overhead per trial: one-candidate round trips to a worker whose device takes no
   time (p50, p95), and per trial in batches of 8;
3. recovery from a killed worker node: when the loss was seen and when the batch finished;
4. the same 20 real CPU configs timed through one Ray worker and through `LocalExecutor`,
   interleaved config by config.

Asserts nothing about times.

    .venv/bin/python benchmarks/cluster.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Optional

import numpy as np

from autotune import config_space
from autotune.cluster.executor import RayExecutor
from autotune.cluster.registry import connect
from autotune.measure import LocalExecutor, MeasureInput, MeasureOptions
from autotune.ops import workload
from autotune.search import tune_loop
from autotune.target import Target

BIN = Path(sys.executable).parent
WL = workload("matmul", M=64, N=64, K=64)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(15)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


def start_head(logdir: Path) -> tuple[subprocess.Popen, str]:
    port = _port()
    log = logdir / "head.log"
    proc = subprocess.Popen([str(BIN / "ray"), "start", "--head", "--block", f"--port={port}",
                             "--num-cpus=0", "--include-dashboard=false",
                             "--disable-usage-stats", "--object-store-memory=100000000",
                             "--dashboard-agent-listen-port=0"],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    while "Ray runtime started" not in log.read_text():
        if proc.poll() is not None:
            raise SystemExit(f"ray head failed:\n{log.read_text()}")
        time.sleep(0.3)
    return proc, f"127.0.0.1:{port}"


def start_worker(address: str, logdir: Path, *args: str) -> subprocess.Popen:
    log = logdir / f"worker-{time.monotonic_ns()}.log"
    proc = subprocess.Popen([sys.executable, "-m", "autotune.cli", "worker", "--address",
                             address, *args], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    while "autotune worker: ready" not in log.read_text():
        if proc.poll() is not None:
            raise SystemExit(f"worker failed:\n{log.read_text()}")
        time.sleep(0.3)
    return proc


def synthetic(address: str, logdir: Path, seconds: float, count: int,
              tag: int) -> tuple[subprocess.Popen, Target]:
    """A worker node of ``count`` synthetic devices advertising a target of their own."""
    spec = f"llvm -mcpu=x86-64-v3 -cores={1000 + tag}"
    proc = start_worker(address, logdir, "--synthetic", str(seconds), "--count", str(count),
                        "--target", spec)
    return proc, Target(spec)


def scaling(address: str, logdir: Path, quick: bool) -> None:
    print("\n1. trials per minute on synthetic workers (random search, batches >= 2W)")
    print(f"{'s/trial':>8} {'workers':>8} {'trials':>7} {'wall s':>8} {'trials/min':>11} "
          f"{'ideal':>8} {'efficiency':>11}")
    tag = 0
    for seconds in (0.1, 0.5, 2.0):
        base: Optional[float] = None
        for count in (1, 2, 4):
            tag += 1
            proc, target = synthetic(address, logdir, seconds, count, tag)
            trials = count * max(4, int((4 if quick else 16) / seconds))
            with RayExecutor(target) as ex:
                ex.registry.wait_live(target.key, count)
                t0 = time.perf_counter()
                tune_loop(WL, target, config_space(WL, target), ex, trials=trials, tuner="random",
                          retime=0, batch_size=2 * count)
                wall = time.perf_counter() - t0
            _stop(proc)
            rate = trials / wall * 60
            base = base or rate
            ideal = 60 / seconds * count
            print(f"{seconds:>8g} {count:>8} {trials:>7} {wall:>8.2f} {rate:>11.1f} "
                  f"{ideal:>8.0f} {rate / (base * count):>11.2f}")


def overhead(address: str, logdir: Path) -> None:
    print("\n2. dispatch overhead (a worker whose device takes no time)")
    proc, target = synthetic(address, logdir, 0.0, 1, 99)
    sp = config_space(WL, target)
    with RayExecutor(target) as ex:
        ex.registry.wait_live(target.key, 1)
        one = [MeasureInput(WL, target, sp.get(i)) for i in range(200)]
        for inp in one[:20]:  # warm up
            ex.submit([inp])
        singles = []
        for inp in one:
            t0 = time.perf_counter()
            ex.submit([inp])
            singles.append(time.perf_counter() - t0)
        batches = []
        for k in range(25):
            inputs = one[8 * k: 8 * k + 8]
            t0 = time.perf_counter()
            ex.submit(inputs)
            batches.append((time.perf_counter() - t0) / 8)
    _stop(proc)
    q = lambda xs, p: float(np.percentile(np.asarray(xs) * 1e3, p))  # noqa: E731
    print(f"{'case':<28} {'p50 ms':>8} {'p95 ms':>8}")
    print(f"{'one candidate per submit':<28} {q(singles, 50):>8.2f} {q(singles, 95):>8.2f}")
    print(f"{'per trial, batches of 8':<28} {q(batches, 50):>8.2f} {q(batches, 95):>8.2f}")


def recovery(address: str, logdir: Path) -> None:
    print("\n3. recovery from a killed worker node (2 nodes, 0.5 s per trial, 16 candidates)")
    first, target = synthetic(address, logdir, 0.5, 1, 200)
    second = start_worker(address, logdir, "--synthetic", "0.5", "--target",
                          "llvm -mcpu=x86-64-v3 -cores=1200")
    sp = config_space(WL, target)
    inputs = [MeasureInput(WL, target, sp.get(i)) for i in range(16)]
    with RayExecutor(target) as ex:
        ex.registry.wait_live(target.key, 2)
        killed_at: list[float] = []

        def kill() -> None:
            os.killpg(first.pid, signal.SIGKILL)
            killed_at.append(time.perf_counter())

        t0 = time.perf_counter()
        threading.Timer(1.2, kill).start()
        results = ex.submit(inputs)
        end = time.perf_counter()
        seen = [w for w in ex.registry.snapshot() if w["state"] == "dead"]
    _stop(first)
    _stop(second)
    ok = sum(r.ok for r in results)
    by = {r.extra["measured_by"]["worker"] for r in results}
    print(f"{'batch s':>8} {'kill at s':>10} {'done after kill s':>18} {'ok':>4} "
          f"{'workers':>8} {'lost':>5}")
    print(f"{end - t0:>8.2f} {killed_at[0] - t0:>10.2f} {end - killed_at[0]:>18.2f} "
          f"{ok:>4}/{len(inputs)} {len(by):>8} {len(seen):>5}")
    print(f"(no loss: 16 x 0.5 s over 2 workers = 4.0 s; over 1 after the kill: "
          f"{1.2 + (16 - 2 * 1.2 / 0.5) * 0.5:.1f} s)")


def fidelity(address: str, logdir: Path, quick: bool) -> None:
    n = 8 if quick else 20
    print(f"\n4. the same {n} real CPU configs (matmul 256^3): one Ray worker vs LocalExecutor")
    wl = workload("matmul", M=256, N=256, K=256)
    target = Target("llvm")
    sp = config_space(wl, target)
    configs = [sp.default()] + sp.sample(np.random.default_rng(0), 4 * n)
    options = MeasureOptions(repeat=5, min_repeat_ms=20)
    with LocalExecutor(target, options) as local:
        first = local.submit([MeasureInput(wl, target, c) for c in configs])
    picked = [c for c, r in zip(configs, first) if r.ok][:n]
    inputs = [MeasureInput(wl, target, c) for c in picked]
    # Interleaved config by config, with the worker node up throughout: both paths time
    # beside the same Ray daemons, and drift of the machine hits both alike.
    proc = start_worker(address, logdir, "--no-gpus")
    local_res, ray_res = [], []
    with LocalExecutor(target, options) as local, RayExecutor(target, options=options) as ex:
        ex.registry.wait_live(target.key, 1)
        for inp in inputs:
            local_res += local.submit([inp])
            ray_res += ex.submit([inp])
    _stop(proc)
    flops = wl.flops()
    print(f"{'config':>12} {'local GFLOP/s':>14} {'spread %':>9} {'ray GFLOP/s':>12} "
          f"{'spread %':>9} {'ray/local':>10}")
    ratios, agree = [], 0
    for cfg, a, b in zip(picked, local_res, ray_res):
        if not (a.ok and b.ok):
            print(f"{cfg.index:>12} {a.error.value:>14} {'':>9} {b.error.value:>12}")
            continue
        spread_a = (max(a.costs) - min(a.costs)) / a.cost * 100
        spread_b = (max(b.costs) - min(b.costs)) / b.cost * 100
        ratio = a.cost / b.cost
        ratios.append(ratio)
        lo_a, hi_a, lo_b, hi_b = min(a.costs), max(a.costs), min(b.costs), max(b.costs)
        agree += lo_b <= hi_a and lo_a <= hi_b  # the repeat ranges overlap
        print(f"{cfg.index:>12} {flops / a.cost / 1e9:>14.1f} {spread_a:>9.1f} "
              f"{flops / b.cost / 1e9:>12.1f} {spread_b:>9.1f} {ratio:>10.3f}")
    if ratios:
        print(f"median ray/local {statistics.median(ratios):.3f}; repeat ranges overlap in "
              f"{agree} of {len(ratios)} configs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer trials (a smoke run)")
    args = parser.parse_args()
    print(f"target {Target('llvm').key}; {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        logdir = Path(tmp)
        head, address = start_head(logdir)
        try:
            connect(address)
            scaling(address, logdir, args.quick)
            overhead(address, logdir)
            recovery(address, logdir)
            fidelity(address, logdir, args.quick)
        finally:
            import ray

            ray.shutdown()
            _stop(head)


if __name__ == "__main__":
    main()
