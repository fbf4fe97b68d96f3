"""Whole models on a CUDA GPU: ResNet-18, ResNet-50 and MobileNet-V2 (torchvision's
architectures, random weights and BatchNorm statistics, eval), per dtype at batch 1 and 8:
torch eager, torch.compile (default, and mode="max-autotune", which uses CUDA graphs), and
autotune's compiled model without and with CUDA graphs.

    python benchmarks/gpu_models.py --quick                  # ~2 minutes: the smoke run
    python benchmarks/gpu_models.py --trials 0,2000          # every model, dtype and batch
    python benchmarks/gpu_models.py --models resnet18 --dtypes float16 --batch 1

Every column runs in a process of its own (cuDNN timed beside another library's kernels has
read slower), prepared side by side; then the parent times them in interleaved rounds, one
process at a time: each call is followed by torch.cuda.synchronize() and a round's figure
is the median over --repeat calls; each ratio is the median over rounds of one round's
ratio. TF32 is off everywhere (fp32 rows compare fp32 arithmetic); torch's columns run half
models on channels_last tensors (cuDNN's fast layout; --torch-layout), autotune's too on
Hopper (--layout auto, the default as in compile_model: its convs as NHWC wgmma kernels,
target sm_90a), else on NCHW. --prepare-timeout leaves out a column not ready in time
(max-autotune can compile for many minutes). The header names the GPU, its clocks and the
target key, each table its target key; the breakdown times each distinct kernel against
torch's same folded layer (CUDA events over back-to-back calls). Budgets in --trials are
totals in --db (tune_model, which measures with pycuda); 0 is the templates' default
configs.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import statistics
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

COLUMNS = ("eager", "compile", "max-autotune", "autotune", "autotune+graphs")
SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
MODELS = ("resnet18", "resnet50", "mobilenetv2")


# --- the models (torchvision's architectures, without torchvision) ------------------------

def _models() -> dict[str, Callable[[], Any]]:
    from torch import nn

    def conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1,
                act: type | None = nn.ReLU) -> list[nn.Module]:
        layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
                  nn.BatchNorm2d(cout)]
        return layers + ([act(inplace=True)] if act else [])

    class Block(nn.Module):
        """ResNet's basic block (expansion 1) or bottleneck (expansion 4)."""

        def __init__(self, cin: int, width: int, stride: int, bottleneck: bool) -> None:
            super().__init__()
            cout = width * (4 if bottleneck else 1)
            if bottleneck:
                body = (conv_bn(cin, width, 1) + conv_bn(width, width, 3, stride)
                        + conv_bn(width, cout, 1, act=None))
            else:
                body = conv_bn(cin, width, 3, stride) + conv_bn(width, cout, 3, act=None)
            self.body = nn.Sequential(*body)
            self.down = (nn.Sequential(*conv_bn(cin, cout, 1, stride, act=None))
                         if stride != 1 or cin != cout else None)
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x: Any) -> Any:
            return self.relu(self.body(x) + (x if self.down is None else self.down(x)))

    def resnet(depths: tuple[int, ...], bottleneck: bool) -> nn.Module:
        layers, cin = conv_bn(3, 64, 7, 2) + [nn.MaxPool2d(3, 2, 1)], 64
        for i, depth in enumerate(depths):
            for j in range(depth):
                block = Block(cin, 64 << i, 2 if j == 0 and i > 0 else 1, bottleneck)
                layers.append(block)
                cin = (64 << i) * (4 if bottleneck else 1)
        return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(cin, 1000))

    class Inverted(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
            super().__init__()
            mid = cin * expand
            body = conv_bn(cin, mid, 1, act=nn.ReLU6) if expand != 1 else []
            body += conv_bn(mid, mid, 3, stride, mid, nn.ReLU6) + conv_bn(mid, cout, 1, act=None)
            self.body = nn.Sequential(*body)
            self.residual = stride == 1 and cin == cout

        def forward(self, x: Any) -> Any:
            return x + self.body(x) if self.residual else self.body(x)

    def mobilenet_v2() -> nn.Module:
        layers, cin = conv_bn(3, 32, 3, 2, act=nn.ReLU6), 32
        for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                           (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
            for i in range(n):
                layers.append(Inverted(cin, c, s if i == 0 else 1, t))
                cin = c
        return nn.Sequential(*layers, *conv_bn(cin, 1280, 1, act=nn.ReLU6),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2),
                             nn.Linear(1280, 1000))

    return {"resnet18": lambda: resnet((2, 2, 2, 2), False),
            "resnet50": lambda: resnet((3, 4, 6, 3), True),
            "mobilenetv2": mobilenet_v2}


def build(name: str, batch: int, dtype: str, device: str = "cuda", size: int = 224
          ) -> tuple[Any, Any]:
    """Model ``name`` in eval mode (seeded weights, random BatchNorm statistics) and an
    input of ``batch`` ``size`` x ``size`` images, both in ``dtype`` on ``device``."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = _models()[name]()
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    dt = getattr(torch, dtype)
    x = torch.randn(batch, 3, size, size, generator=g)
    return model.eval().to(device=device, dtype=dt), x.to(device=device, dtype=dt)


# --- one column, in its own process -------------------------------------------------------

@dataclass(frozen=True)
class Job:
    model: str
    dtype: str
    batch: int
    column: str
    target: str
    db: str
    torch_layout: str
    layout: str = "auto"  # autotune's: "auto" runs Hopper's convs NHWC on channels_last
    verbose: bool = False  # max-autotune's per-choice tables (hundreds of lines a model)


def _prepare(job: Job) -> tuple[Callable[[], Any], Any, Any, dict[str, float]]:
    """The column's call, its module and input (for the breakdown) and its preparation
    times."""
    import torch

    import autotune

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("highest")
    model, x = build(job.model, job.batch, job.dtype)
    ours = job.column.startswith("autotune")
    if (job.layout == "auto") if ours else (job.torch_layout == "channels_last"):
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    t0 = time.perf_counter()
    if job.column == "eager":
        module = model
    elif job.column in ("compile", "max-autotune"):
        if not job.verbose:
            import torch._inductor.select_algorithm as select_algorithm
            select_algorithm.PRINT_AUTOTUNE = False
        module = torch.compile(model, mode=None if job.column == "compile" else job.column)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # layers without records run their defaults
            module = autotune.compile_model(model, x, target=job.target, db=job.db,
                                            layout=job.layout,
                                            cuda_graphs=job.column == "autotune+graphs")
    built = time.perf_counter() - t0
    with torch.no_grad():
        module(x)  # compiles (torch.compile) or captures (graphs)
        torch.cuda.synchronize()
    first = time.perf_counter() - t0 - built
    return (lambda: module(x)), module, x, {"build_s": built, "first_call_s": first}


def _latency(call: Callable[[], Any], repeat: int, warmup: int) -> float:
    import torch

    with torch.no_grad():
        for _ in range(warmup):
            call()
        torch.cuda.synchronize()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            call()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _worker(conn: Any, job: Job) -> None:
    """Prepare the column, then answer the parent's requests until it says stop. In a
    process group of its own (torch.compile's workers with it), ended with the parent."""
    from autotune.process.child import set_parent_death_signal

    os.setsid()
    set_parent_death_signal()
    try:
        call, module, x, prep = _prepare(job)
        with __import__("torch").no_grad():
            out = call().float().cpu()
        conn.send(("ready", prep, out))
    except Exception as exc:  # no triton, a failed build: the column is left out
        conn.send(("failed", f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
                   if str(exc).strip() else type(exc).__name__, traceback.format_exc()))
        return
    while True:
        request, *args = conn.recv()
        if request == "time":
            conn.send(_latency(call, *args))
        elif request == "breakdown":
            conn.send(breakdown(module, (x,), *args))
        else:
            return


def breakdown(compiled: Any, inputs_of: Any, repeat: int, rounds: int) -> list[tuple]:
    """Per distinct kernel: (count, autotune us, torch us, layer), each the median over
    ``rounds`` interleaved rounds of CUDA-event time per call over ``repeat`` back-to-back
    calls on the arguments the model gave it (torch runs the same folded layer)."""
    import torch

    from autotune.frontend.runtime import kernel_modules

    mods = kernel_modules(compiled)
    seen: dict[Any, list[Any]] = {}
    for m in mods:
        seen.setdefault(m.workload, []).append(m)
    args: dict[int, tuple] = {}
    hooks = [m.register_forward_pre_hook(lambda mod, a: args.setdefault(id(mod), a))
             for m in mods]
    with torch.no_grad():
        compiled(*inputs_of)
    for h in hooks:
        h.remove()

    def device_us(call: Callable[[], Any]) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        call()
        start.record()
        for _ in range(repeat):
            call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / repeat

    rows = []
    with torch.no_grad():
        for wl, group in seen.items():
            a = args[id(group[0])]
            ours, theirs = [], []
            for _ in range(rounds):
                ours.append(device_us(lambda: group[0](*a)))
                theirs.append(device_us(lambda: group[0].forward_torch(*a)))
            rows.append((len(group), statistics.median(ours), statistics.median(theirs),
                         f"{group[0].place}: {wl}"))
    return rows


# --- the parent: tuning, interleaved rounds, tables ---------------------------------------

@dataclass
class Result:
    model: str
    dtype: str
    batch: int
    times: dict[str, list[float]]
    notes: list[str]


def run_one(name: str, dtype: str, batch: int, args: argparse.Namespace, target: Any
            ) -> Result:
    """One model, dtype and batch: every column prepared in its own process, then timed in
    interleaved rounds; prints its table (and the breakdown)."""
    import torch

    import autotune

    model, x = build(name, batch, dtype)
    tasks = autotune.extract(model, x, target=target, layout=args.layout)
    print(f"\n{name} {SHORT[dtype]} batch {batch} ({target.key}): {len(tasks.tasks)} tasks, "
          f"{sum(t.weight for t in tasks.tasks)} kernels, {len(tasks.unsupported)} unsupported "
          f"({', '.join(sorted({u.op for u in tasks.unsupported})) or '-'})", flush=True)
    for budget in args.budgets:
        if budget > 0:
            t0 = time.monotonic()
            result = autotune.tune_model(model, (x,), trials=budget, target=target, db=args.db,
                                         layout=args.layout)
            print(f"  tuned to {result.trials_done} trials in {time.monotonic() - t0:.0f} s",
                  flush=True)
    del model, x
    torch.cuda.empty_cache()
    ctx = mp.get_context("spawn")
    workers: dict[str, Any] = {}
    for col in args.columns:
        parent, child = ctx.Pipe()
        job = Job(name, dtype, batch, col, target.key, args.db, args.torch_layout, args.layout,
                  args.verbose)
        # not daemonic: torch.compile starts compile workers of its own
        proc = ctx.Process(target=_worker, args=(child, job))
        proc.start()
        workers[col] = (proc, parent)
    try:
        return _time_columns(name, dtype, batch, args, workers)
    finally:  # interrupted (Ctrl-C, timeout): no column outlives the run
        for proc, _ in workers.values():
            if proc.is_alive():
                _end(proc)


def _time_columns(name: str, dtype: str, batch: int, args: argparse.Namespace,
                  workers: dict[str, Any]) -> Result:
    """Wait for the columns to be ready, time them in interleaved rounds, print the table."""
    notes, outputs = [], {}
    deadline = time.monotonic() + (args.prepare_timeout or float("inf"))
    for col, (proc, conn) in list(workers.items()):
        why = _not_ready(proc, conn, deadline)
        if why:
            notes.append(f"{col} {why}: left out" if why.startswith("died") else
                         f"{col} not ready within {args.prepare_timeout:g} s: left out")
            _end(proc)
            del workers[col]
            continue
        status, *rest = conn.recv()
        if status == "failed":
            notes.append(f"{col} failed: {rest[0]}")
            if args.verbose:
                print(rest[1], file=sys.stderr)
            proc.join()
            del workers[col]
            continue
        prep, outputs[col] = rest
        notes.append(f"{col}: built {prep['build_s']:.1f} s, "
                     f"first call {prep['first_call_s']:.1f} s")
    times: dict[str, list[float]] = {col: [] for col in workers}
    for _ in range(args.rounds):
        for col, (_, conn) in workers.items():
            conn.send(("time", args.repeat, 5))
            times[col].append(conn.recv())
    if "eager" in outputs:
        want = outputs["eager"]
        for col in outputs:
            if col.startswith("autotune"):
                err = ((outputs[col] - want).abs().max() / want.abs().max()).item()
                notes.append(f"{col} max diff from eager {err:.1e} of the largest output")
    rows = None
    if not args.no_breakdown and "autotune" in workers:
        workers["autotune"][1].send(("breakdown", 20, 3))
        rows = workers["autotune"][1].recv()
    for proc, conn in list(workers.values()):
        conn.send(("stop",))
        proc.join(timeout=60)
    workers.clear()
    result = Result(name, dtype, batch, times, notes)
    print_result(result, rows)
    return result


def _not_ready(proc: Any, conn: Any, deadline: float) -> str:
    """Why the column's process has no answer by ``deadline`` ("" once it has one)."""
    while not conn.poll(min(max(deadline - time.monotonic(), 0.0), 1.0)):
        if not proc.is_alive():
            return f"died while preparing (exit code {proc.exitcode})"
        if time.monotonic() >= deadline:
            return "late"
    return ""


def _end(proc: Any) -> None:
    """Kill a column's process group (its compile workers too) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # not yet its own group, or gone
        proc.kill()
    proc.join()


def _ratio(times: dict[str, list[float]], num: str, den: str) -> str:
    if num not in times or den not in times:
        return "-"
    return f"{statistics.median(a / b for a, b in zip(times[num], times[den])):.2f}x"


def print_result(r: Result, rows: list[tuple] | None) -> None:
    ours = "autotune+graphs" if "autotune+graphs" in r.times else "autotune"
    print(f"  {'column':<16} {'ms':>8} {'eager/it':>9} {'max-autotune/it':>16}")
    for col, ts in r.times.items():
        print(f"  {col:<16} {statistics.median(ts) * 1e3:8.3f} {_ratio(r.times, 'eager', col):>9} "
              f"{_ratio(r.times, 'max-autotune', col):>16}")
    for note in r.notes:
        print(f"  {note}")
    print(f"  ({ours}: {_ratio(r.times, 'eager', ours)} eager's speed, "
          f"{_ratio(r.times, 'max-autotune', ours)} max-autotune's)")
    if rows:
        print(f"    {'x':>3} {'autotune us':>11} {'torch us':>9} {'speedup':>7}  layer")
        for n, a, t, layer in sorted(rows, key=lambda row: -row[0] * row[1]):
            print(f"    {n:3d} {a:11.1f} {t:9.1f} {t / a:6.2f}x  {layer}")
        print(f"    sum over layers: autotune {sum(n * a for n, a, _, _ in rows) / 1e3:.3f} ms, "
              f"torch {sum(n * t for n, _, t, _ in rows) / 1e3:.3f} ms")


def print_summary(results: list[Result], target: Any) -> None:
    print(f"\nsummary ({target.key}; ms, median over rounds; ratios: column / autotune+graphs)")
    head = "".join(f" {c:>15}" for c in COLUMNS)
    print(f"  {'model':<12} {'dtype':<5} {'batch':>5}{head} {'vs eager':>9} {'vs max-at':>9}")
    for r in results:
        cells = "".join(f" {statistics.median(r.times[c]) * 1e3:15.3f}" if c in r.times
                        else f" {'-':>15}" for c in COLUMNS)
        print(f"  {r.model:<12} {SHORT[r.dtype]:<5} {r.batch:5d}{cells} "
              f"{_ratio(r.times, 'eager', 'autotune+graphs'):>9} "
              f"{_ratio(r.times, 'max-autotune', 'autotune+graphs'):>9}")


def main(argv: list[str] | None = None) -> int:
    from benchmarks.gpu import seconds

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"models, comma-separated ({', '.join(MODELS)})")
    parser.add_argument("--dtypes", default="float32,float16",
                        help="dtypes, comma-separated (float32, float16, bfloat16)")
    parser.add_argument("--batch", default="1,8", help="batch sizes, comma-separated")
    parser.add_argument("--trials", default="0", help="total budgets per model, "
                        "comma-separated, each continuing the last (0: default configs)")
    parser.add_argument("--columns", default=",".join(COLUMNS))
    parser.add_argument("--db", default="sqlite:///benchmarks/data/gpu_models.db")
    parser.add_argument("--repeat", type=int, default=50, help="synchronised calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--torch-layout", default="auto",
                        choices=("auto", "channels_last", "contiguous"),
                        help="torch's tensors: auto is channels_last for half dtypes")
    parser.add_argument("--layout", default="auto", choices=("nchw", "auto"),
                        help="autotune's layout (default auto, as compile_model's): auto runs "
                             "convs channels-last (NHWC, on channels_last tensors) where the "
                             "target has kernels for it: Hopper's wgmma (sm_90a)")
    parser.add_argument("--prepare-timeout", type=seconds, default=None, metavar="S",
                        help="leave out a column not ready S seconds after the columns start "
                             "preparing (max-autotune's compile can take many minutes)")
    parser.add_argument("--quick", action="store_true",
                        help="the smoke run (~2 minutes on an H200): resnet18 fp16 at batch 1, "
                             "default configs, no max-autotune, 3 rounds of 20 calls")
    parser.add_argument("--no-breakdown", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="a failed column's traceback")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.dtypes, args.batch, args.trials = "resnet18", "float16", "1", "0"
        args.columns = ",".join(c for c in COLUMNS if c != "max-autotune")
        args.repeat, args.rounds = 20, 3
    args.columns = [c for c in args.columns.split(",") if c]
    unknown = set(args.columns) - set(COLUMNS)
    if unknown:
        parser.error(f"--columns: unknown {sorted(unknown)}; expected {', '.join(COLUMNS)}")
    try:
        args.budgets = [int(b) for b in args.trials.split(",") if b.strip()]
    except ValueError:
        parser.error(f"--trials: {args.trials!r} is not a list of whole numbers")
    if not all(0 <= b <= 100_000 for b in args.budgets):
        parser.error(f"--trials: {args.budgets}; expected budgets from 0 to 100000")
    if not (1 <= args.repeat <= 10_000 and 1 <= args.rounds <= 1_000):
        parser.error(f"--repeat {args.repeat}, --rounds {args.rounds}: expected 1-10000 calls "
                     "per round and 1-1000 rounds")
    args.models = [m for m in args.models.split(",") if m]
    unknown = set(args.models) - set(MODELS)
    if unknown or not args.models:
        parser.error(f"--models: unknown {sorted(unknown)}; expected some of {', '.join(MODELS)}")
    args.dtypes = [d for d in args.dtypes.split(",") if d]
    unknown = set(args.dtypes) - set(SHORT)
    if unknown or not args.dtypes:
        parser.error(f"--dtypes: unknown {sorted(unknown)}; expected some of {', '.join(SHORT)}")
    try:
        args.batch = [int(b) for b in args.batch.split(",") if b]
    except ValueError:
        parser.error(f"--batch: {args.batch!r} is not a list of whole numbers")
    if not args.batch or not all(1 <= b <= 256 for b in args.batch):
        parser.error(f"--batch: {args.batch}; expected sizes from 1 to 256")

    import torch

    import autotune
    from benchmarks.gpu import gpu_description

    if not torch.cuda.is_available():
        print("benchmarks/gpu_models.py: torch finds no CUDA GPU", file=sys.stderr)
        return 2
    major, minor = torch.cuda.get_device_capability()
    # Hopper's channels-last convs are wgmma kernels: the arch-specific target
    arch = f"sm_{major}{minor}" + ("a" if args.layout == "auto" and major == 9 else "")
    target = autotune.Target(f"cuda -arch={arch}")
    print(f"{gpu_description()}\ntarget {target.key}; torch {torch.__version__}; TF32 off; "
          f"torch layout {args.torch_layout}; autotune layout {args.layout}; "
          f"{args.rounds} interleaved rounds of "
          f"{args.repeat} synchronised calls; columns in processes of their own", flush=True)
    results: list[Result] = []
    code = run_all(args, target, results)
    print_summary(results, target)
    print(gpu_description())  # the clocks after the load
    return code


def run_all(args: argparse.Namespace, target: Any, results: list[Result]) -> int:
    """Every model, dtype and batch into ``results``: 0, or 130 when interrupted (a timeout's
    SIGINT, Ctrl-C), with the rows finished until then kept for the summary."""
    try:
        for dtype in args.dtypes:
            layout = args.torch_layout
            if layout == "auto":
                layout = "contiguous" if dtype == "float32" else "channels_last"
            args_dtype = argparse.Namespace(**{**vars(args), "torch_layout": layout})
            for name in args.models:
                for batch in args.batch:
                    results.append(run_one(name, dtype, batch, args_dtype, target))
    except KeyboardInterrupt:
        print(f"\ninterrupted: the summary holds the {len(results)} finished rows",
              file=sys.stderr, flush=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
