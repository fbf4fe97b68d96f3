"""`autotune worker`: join a Ray cluster and measure on this host's devices."""
from __future__ import annotations

import argparse
from typing import Any

from autotune.cli.common import (
    CliError,
    Command,
    settings_of,
    usage_error,
)
from autotune.target import Target, host_cores


def _configure_worker(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", required=True, metavar="HOST:PORT",
                   help="the Ray head to join (as started by 'ray start --head')")
    p.add_argument("--no-cpu", action="store_true", help="do not measure on this host's CPU")
    p.add_argument("--no-gpus", action="store_true", help="do not measure on its CUDA GPUs")
    p.add_argument("--synthetic", type=float, default=None, metavar="SECONDS",
                   help="instead of real devices, run synthetic ones that take SECONDS per "
                        "trial (benchmarks and tests of the cluster itself)")
    p.add_argument("--count", type=int, default=1, metavar="N",
                   help="synthetic devices to run (with --synthetic; default 1)")
    p.add_argument("--target", default="llvm", metavar="SPEC",
                   help="the target synthetic devices advertise (default: this CPU's)")
    p.add_argument("--crash", default="", metavar="INDICES",
                   help="synthetic devices exit when measuring these config indices "
                        "(comma-separated; fault injection)")


def _run_worker(args: argparse.Namespace) -> int:
    try:
        from autotune.cluster import devices, worker
        from autotune.cluster.actor import SleepDevice
    except ImportError as exc:
        raise CliError(f"'autotune worker' needs Ray: pip install 'autotune[cluster]' ({exc})")
    from autotune.measure.options import MeasureOptions

    options = MeasureOptions.from_settings(settings_of())
    if args.synthetic is not None:
        if not 0 <= args.synthetic <= 3600 or not 1 <= args.count <= 64:
            raise usage_error("--synthetic must be within 0..3600 s and --count within 1..64")
        try:
            target = Target(args.target)
            crash = frozenset(int(i) for i in args.crash.split(",") if i.strip())
        except ValueError as exc:
            raise usage_error(str(exc)) from None
        name = f"synthetic ({args.synthetic:g} s per trial)"
        found = [devices.Device(args.target, target.key, name)] * args.count
        plan = worker.plan_for(found, options, SleepDevice(args.synthetic, crash))
        return _run_plan(worker, args.address, plan, 0, 0)
    found = devices.host_devices(cpu=not args.no_cpu, gpus=not args.no_gpus)
    if not found:
        raise CliError("no device to measure on (no CPU asked for, no supported CUDA GPU)")
    plan = worker.plan_for(found, options)
    gpus = sum(d.gpu is not None for d in found)
    return _run_plan(worker, args.address, plan, 0 if args.no_cpu else host_cores(), gpus)


def _run_plan(worker: Any, address: str, plan: Any, cpus: int, gpus: int) -> int:
    try:
        return worker.run(address, plan, num_cpus=cpus, num_gpus=gpus)
    except RuntimeError as exc:  # the node or an actor did not start: say why, in one line
        raise CliError(str(exc)) from None


COMMANDS: tuple[Command, ...] = (
    Command("worker", "join a Ray cluster and measure on this host's devices",
            _configure_worker, _run_worker),
)
