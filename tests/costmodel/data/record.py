"""Re-record the measured dataset the cost-model tests use (real kernels, this machine).

Run from the repository root: ``.venv/bin/python tests/costmodel/data/record.py``. It times
uniformly random configs of a few small matmuls with `LocalExecutor` and writes them in the
database's JSON-lines export format (gzip), which `ReplayExecutor.from_jsonl` also reads.
Kernels run on one core (``-cores=1``): on a shared machine a parallel kernel's timing is
dominated by waits for the other thread's core (55 ms instead of 17 us seen for 128^3).
"""
from __future__ import annotations

import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np

import autotune
from autotune.driver import config_space
from autotune.measure import LocalExecutor, MeasureInput, MeasureOptions
from autotune.target import Target

OUT = Path(__file__).with_name("matmul_llvm.jsonl.gz")
PLAN = [  # (params, configs): the first is the tests' main workload, the others its history
    ({"M": 128, "N": 128, "K": 128}, 320),
    ({"M": 64, "N": 256, "K": 128}, 160),
    ({"M": 192, "N": 96, "K": 64}, 160),
]
OPTS = MeasureOptions(repeat=5, min_repeat_ms=10.0, n_build_workers=2, run_timeout=10.0)


def main() -> None:
    target = Target("llvm -cores=1")
    rng = np.random.default_rng(2024)
    lines = []
    with LocalExecutor(target, OPTS) as ex:
        for params, n in PLAN:
            wl = autotune.workload("matmul", **params)
            configs = config_space(wl, target).sample(rng, n)
            t0 = time.perf_counter()
            for k in range(0, n, 16):
                batch = configs[k:k + 16]
                results = ex.submit([MeasureInput(wl, target, c) for c in batch])
                for cfg, res in zip(batch, results):
                    lines.append({
                        "workload": wl.to_dict(), "target": target.key,
                        "config": cfg.to_dict(), "costs": list(res.costs),
                        "cost": res.cost if res.ok else None,
                        "gflops": wl.flops() / res.cost / 1e9 if res.ok else None,
                        "error": res.error.value, "error_msg": res.error_msg[:200],
                        "build_s": res.build_s, "run_s": res.run_s,
                        "timestamp": res.timestamp, "extra": {}})
            print(f"{wl}: {n} configs in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    with gzip.open(OUT, "wt", encoding="utf-8") as fp:
        for obj in lines:
            fp.write(json.dumps(obj) + "\n")
    print(f"wrote {len(lines)} records to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
