"""`autotune tune-model` and `autotune bench-model`: a model named ``module:function``, the
function returning ``(model, example_inputs)``.

Errors are `CliError`s, reported by `autotune.cli.main` as for every other command.
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
from functools import partial
from typing import Any, Callable

from autotune.cli.common import (
    CliError,
    Command,
    db_url,
    refuse_unmeasurable,
    shown,
    usage_error,
)
from autotune.target import Target


def load_model(spec: str) -> tuple[Any, Any]:
    """``(model, example_inputs)`` from ``module:function`` (the working directory is on the
    import path, so a local file's module works)."""
    module_name, colon, func_name = spec.partition(":")
    if not colon or not module_name or not func_name:
        raise usage_error(f"bad model {spec!r}: expected module:function, as in "
                          f"benchmarks.models:resnet18")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        func = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as exc:
        raise CliError(f"cannot load {spec}: {exc}") from None
    built = func()
    if not (isinstance(built, tuple) and len(built) == 2):
        raise CliError(f"{spec}() must return (model, example_inputs), got {type(built).__name__}")
    return built


def _add_model(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODULE:FUNCTION",
                   help="a function returning (model, example_inputs), e.g. "
                        "benchmarks.models:resnet18")
    p.add_argument("--target", default="llvm", help="target spec (default: llvm, this CPU)")
    p.add_argument("--layout", default=None, choices=["nchw", "auto"],
                   help="layouts: nchw, or auto: channel-blocked NCHW<x>c from the first "
                        "conv to the global pool where the channels allow (llvm), "
                        "channels-last half convs on Hopper (cuda); default: auto")
    p.add_argument("--db", metavar="URL", default=None,
                   help="database URL or SQLite file path (default: $AUTOTUNE_DB_URL or "
                        "sqlite:///autotune.db)")


def configure_tune_model(p: argparse.ArgumentParser) -> None:
    from autotune.search import DEFAULT_BATCH_SIZE, DEFAULT_TUNER, TUNERS

    _add_model(p)
    p.add_argument("--trials", type=int, default=1000,
                   help="trials for the whole model, earlier records of its workloads "
                        "included (default 1000)")
    p.add_argument("--tuner", default=DEFAULT_TUNER, choices=list(TUNERS),
                   help=f"search strategy per task (default {DEFAULT_TUNER})")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, metavar="N",
                   help=f"trials per round (default {DEFAULT_BATCH_SIZE})")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--no-transfer", action="store_true",
                   help="do not seed each task's cost model with the other tasks' records")


def run_tune_model(args: argparse.Namespace) -> int:
    from autotune.measure.options import MeasureOptions
    from autotune.settings import Settings

    if args.trials < 0:
        raise usage_error(f"--trials must be >= 0, got {args.trials}")
    if args.batch_size < 1:
        raise usage_error(f"--batch-size must be >= 1, got {args.batch_size}")
    try:
        target = Target(args.target)
    except ValueError as exc:
        raise usage_error(str(exc)) from None
    refuse_unmeasurable(target, Settings())  # before the model is loaded or a run recorded
    torch = _torch()
    model, inputs = load_model(args.model)
    from autotune.frontend import extract, tune_tasks
    from autotune.measure import MeasureUnavailable

    with torch.no_grad():
        try:
            tasks = extract(model, inputs, target=args.target, layout=args.layout)
        except ValueError as exc:
            raise usage_error(str(exc)) from None
    print(f"{tasks.name}: {len(tasks.tasks)} tasks, {sum(t.weight for t in tasks.tasks)} "
          f"kernels, {len(tasks.unsupported)} unsupported; {args.trials} trials on "
          f"{args.target}, database {shown(db_url(args))}", file=sys.stderr)
    for u in tasks.unsupported:
        print(f"  left to torch: {u.node} ({u.op}): {u.reason}", file=sys.stderr)
    try:
        result = tune_tasks(tasks, trials=args.trials, target=args.target, db=db_url(args),
                            tuner=args.tuner, batch_size=args.batch_size, seed=args.seed,
                            transfer=not args.no_transfer,
                            measure_options=MeasureOptions.from_settings(Settings()),
                            progress=sys.stderr)
    except MeasureUnavailable as exc:  # a worker that could not start
        raise CliError(str(exc)) from None
    for name, why in result.failed.items():
        print(f"task {name} failed: {why}", file=sys.stderr)
    est = result.estimated_latency_s
    print(f"model run {result.run_id}: {result.trials} trials measured, {result.trials_done}/"
          f"{result.budget} spent; estimated latency "
          f"{'unknown' if est is None else f'{est * 1e3:.3f} ms'}")
    return 0 if est is not None else 1


def configure_bench_model(p: argparse.ArgumentParser) -> None:
    _add_model(p)
    p.add_argument("--repeat", type=int, default=50, help="timed calls of each (default 50)")


def run_bench_model(args: argparse.Namespace) -> int:
    if not 1 <= args.repeat <= 100_000:
        raise usage_error(f"--repeat must be in [1, 100000], got {args.repeat}")
    torch = _torch()
    model, inputs = load_model(args.model)
    from autotune.frontend import compile_model
    from autotune.frontend.torch import as_tuple

    inputs = as_tuple(inputs)
    model.eval()
    sync: Callable[[], Any] = lambda: None
    if _target_kind(args.target) == "cuda":  # the model, its inputs and the kernels on the GPU
        if not torch.cuda.is_available():
            raise CliError(f"bench-model on {args.target} needs a CUDA GPU; torch finds none")
        model, inputs = model.cuda(), tuple(x.cuda() for x in inputs)
        torch.backends.cuda.matmul.allow_tf32 = False  # torch in fp32, as the kernels
        torch.backends.cudnn.allow_tf32 = False
        sync = torch.cuda.synchronize
    say = partial(print, file=sys.stderr, flush=True)  # each step, as it starts
    say(f"bench-model: compiling {type(model).__name__}'s kernels for {args.target} "
        f"(their best records in {shown(db_url(args))})")
    try:
        compiled = compile_model(model, inputs, target=args.target, db=db_url(args),
                                 layout=args.layout)
    except ValueError as exc:
        raise usage_error(str(exc)) from None
    with torch.no_grad():
        say(f"bench-model: timing torch eager, {args.repeat} calls")
        eager = median_time(lambda: (model(*inputs), sync()), args.repeat)
        say(f"bench-model: timing the compiled model, {args.repeat} calls")
        tuned = median_time(lambda: (compiled(*inputs), sync()), args.repeat)
        err = (compiled(*inputs) - model(*inputs)).abs().max().item()
    print(f"torch eager {eager * 1e3:.3f} ms  autotune {tuned * 1e3:.3f} ms  "
          f"speedup {eager / tuned:.2f}x  max abs diff {err:.2e}")
    return 0


def _target_kind(spec: str) -> str:
    try:
        return Target(spec).kind
    except ValueError as exc:
        raise usage_error(f"--target: {exc}") from None


def median_time(call: Callable[[], Any], repeat: int, warmup: int = 3) -> float:
    """Median seconds of ``call()`` over ``repeat`` calls, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise CliError("models need PyTorch: pip install 'autotune[torch]'") from None
    return torch


COMMANDS: tuple[Command, ...] = (
    Command("tune-model", "tune every operator of a PyTorch model under one budget",
            configure_tune_model, run_tune_model),
    Command("bench-model", "time a PyTorch model on torch and on its tuned kernels",
            configure_bench_model, run_bench_model),
)
