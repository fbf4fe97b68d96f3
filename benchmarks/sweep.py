"""Every torchvision classification model at defaults (batch 1, float32, 224x224, random
weights): does it compile, does it match eager, how much stays in torch, and its latency
against eager and ONNX Runtime (interleaved rounds, every engine on torch's threads).

    python benchmarks/sweep.py                          # models of up to 100M parameters
    python benchmarks/sweep.py --max-params 0           # all of them (the largest take minutes)
    python benchmarks/sweep.py --models resnet18,regnet_y_400mf --no-engines

Each model runs in its own process (a crash or a timeout is that model's row, not the
sweep's end). Columns: kernels, operators left in torch, compile_model seconds, max
relative error against eager (the issue's bar: 1e-4), eager / ONNX Runtime / autotune ms
(medians over rounds) and autotune against ONNX Runtime (the median of per-round ratios).
Asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.engines import (  # noqa: E402
    SETTLE_S,
    available,
    make_engine,
    max_rel_err,
    onnx_model,
)
from benchmarks.models import (  # noqa: E402
    TORCHVISION,
    interleaved,
    load_model,
    ratio,
    torchvision_models,
)

TOLERANCE = 1e-4


def one(name: str, engines: bool, rounds: int, repeat: int) -> dict:
    """The row of one model (run in a child process)."""
    import autotune

    model, inputs = load_model(TORCHVISION + name, 1)
    tasks = autotune.extract(model, inputs)
    t0 = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the default schedules: no records
        compiled = autotune.compile_model(model, inputs, db=None)
    row: dict = {"model": name, "kernels": sum(t.weight for t in tasks.tasks),
                 "torch_ops": len(tasks.unsupported), "compile_s": time.monotonic() - t0}
    with torch.no_grad():
        want = model(*inputs)
        row["max_rel_err"] = max_rel_err(compiled(*inputs), want)
    calls = {"eager": lambda: model(*inputs), "ours": lambda: compiled(*inputs)}
    if engines:
        try:
            calls["ort"], _ = make_engine("ort", onnx_model(model, inputs), inputs,
                                          torch.get_num_threads())
        except Exception as exc:  # an export ONNX or the engine refuses
            row["ort_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    times = interleaved(calls, rounds, repeat, SETTLE_S if "ort" in calls else 0.0)
    for key in calls:
        row[f"{key}_ms"] = statistics.median(times[key]) * 1e3
    if "ort" in calls:
        row["vs_ort"] = ratio(times, "ort", "ours")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", default="", help="comma-separated torchvision names "
                                                     "(default: every classification model)")
    parser.add_argument("--max-params", type=float, default=100.0,
                        help="leave out models of more million parameters (0: none)")
    parser.add_argument("--no-engines", dest="engines", action="store_false")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child's model
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.engines, args.rounds, args.repeat)))
        return

    import autotune

    tv = torchvision_models()
    names = [n for n in args.models.split(",") if n] or sorted(tv.list_models(module=tv))
    engines = args.engines and not available("ort")
    print(f"target {autotune.Target('llvm').key}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; batch 1, 224x224, defaults (no records); "
          f"{args.rounds} interleaved rounds of {args.repeat} calls"
          + ("" if engines else "; ONNX Runtime left out"))
    print(f"{'model':28} {'kernels':>7} {'torch':>5} {'compile s':>9} {'max rel err':>11} "
          f"{'eager ms':>9} {'ORT ms':>8} {'ours ms':>8} {'vs ORT':>6}")
    rows = []
    for name in names:
        params = _million_params(tv, name)
        if args.max_params and params is not None and params > args.max_params:
            print(f"{name:28} left out: {params:.0f}M parameters (--max-params)")
            continue
        cmd = [sys.executable, __file__, "--one", name, "--rounds", str(args.rounds),
               "--repeat", str(args.repeat)] + ([] if engines else ["--no-engines"])
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout,
                                  env={**os.environ, "PYTHONWARNINGS": "ignore"})
        except subprocess.TimeoutExpired:
            print(f"{name:28} timed out after {args.timeout:.0f} s", flush=True)
            continue
        lines = done.stdout.strip().splitlines()
        if done.returncode or not lines:
            err = (done.stderr.strip().splitlines() or ["?"])[-1][:150]
            print(f"{name:28} failed: {err}", flush=True)
            continue
        row = json.loads(lines[-1])
        rows.append(row)
        bad = "" if row["max_rel_err"] <= TOLERANCE else "  (above 1e-4)"
        print(f"{name:28} {row['kernels']:7d} {row['torch_ops']:5d} {row['compile_s']:9.1f} "
              f"{row['max_rel_err']:11.1e} {row['eager_ms']:9.2f} {row.get('ort_ms', 0):8.2f} "
              f"{row['ours_ms']:8.2f} {row.get('vs_ort', float('nan')):5.2f}x{bad}"
              + (f"  ORT: {row['ort_error']}" if "ort_error" in row else ""), flush=True)
    if rows:
        ok = sum(r["max_rel_err"] <= TOLERANCE for r in rows)
        vs = [r["vs_ort"] for r in rows if "vs_ort" in r]
        print(f"{len(rows)} models ran, {ok} within 1e-4 of eager"
              + (f"; against ONNX Runtime: geomean {statistics.geometric_mean(vs):.2f}x, "
                 f"lowest {min(vs):.2f}x, {sum(v < 0.8 for v in vs)} below 0.8x" if vs else ""))


def _million_params(tv, name: str) -> float | None:
    """The model's parameters (millions) from its weights' metadata, without building it."""
    try:
        weights = tv.get_model_weights(name)
        return next(iter(weights)).meta["num_params"] / 1e6
    except Exception:  # no weights listed
        return None


if __name__ == "__main__":
    main()
