"""The `autotune` command: tune, query and move tuning records from a shell.

Each subcommand is a `Command` in `COMMANDS`: a name, a help line, a function adding its
arguments and a function running it (returning the exit status). User mistakes print one
line ``autotune: error: ...`` and exit 2 (usage) or 1 (a failure such as an unreachable db).
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, NoReturn, Optional, Sequence

from autotune.cli_common import CliError, db_url, shown, usage_error
from autotune.frontend import cli as _models  # tune-model, bench-model (torch loaded lazily)

if TYPE_CHECKING:
    from autotune.ops import Workload
    from autotune.search import TuneResult
    from autotune.settings import Settings
    from autotune.target import Target

PROG = "autotune"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line instead of argparse's usage block; --help shows the usage.
        hint = self.prog if self.prog.startswith(PROG) else PROG
        self.exit(2, f"{PROG}: error: {message} (see '{hint} --help')\n")


@dataclass(frozen=True)
class Command:
    """One subcommand: ``configure`` adds its arguments, ``run`` does it and returns the status."""

    name: str
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# --- shared arguments ------------------------------------------------------------------

def _add_db(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", metavar="URL", default=None,
                   help="database URL (default: $AUTOTUNE_DB_URL or sqlite:///autotune.db)")


def _add_task(p: argparse.ArgumentParser) -> None:
    p.add_argument("op", help="operator name (see 'autotune ops')")
    p.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                   help="operator parameter, repeatable: -p M=1024; pairs as -p stride=2,2")
    p.add_argument("--epilogue", default="", metavar="STAGES",
                   help="fused epilogue stages, comma-separated, e.g. bias,relu "
                        "(stages: bias, scale_shift, residual, relu, relu6; residual adds a "
                        "second tensor of the output's shape)")
    p.add_argument("--target", default="llvm", help="target spec (default: llvm, this CPU)")
    _add_db(p)


def _parse_value(name: str, text: str) -> Any:
    parts = text.replace("x", ",").split(",")
    try:
        values = [int(part) for part in parts]
    except ValueError:
        raise usage_error(f"bad -p {name}={text}: the value must be an integer or a pair "
                          f"like 3,3") from None
    if len(values) == 1:
        return values[0]
    if len(values) == 2:
        return tuple(values)
    raise usage_error(f"bad -p {name}={text}: at most two integers (h,w)")


def parse_params(items: Sequence[str]) -> dict[str, Any]:
    """``["M=64", "stride=2,2"]`` -> ``{"M": 64, "stride": (2, 2)}``."""
    params: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        name, text = name.strip(), text.strip()
        if not eq or not name or not text:
            raise usage_error(f"bad -p {item!r}: expected NAME=VALUE, as in -p M=1024")
        if name in params:
            raise usage_error(f"-p {name} is given twice")
        params[name] = _parse_value(name, text)
    return params


def _task(args: argparse.Namespace) -> tuple["Workload", "Target"]:
    """The workload and target the arguments name (usage errors for bad ones)."""
    from autotune.ops import workload
    from autotune.target import Target

    stages = [s.strip() for s in args.epilogue.split(",") if s.strip()]
    try:
        wl = workload(args.op, epilogue=stages, **parse_params(args.param))
        target = Target(args.target)
    except ValueError as exc:
        raise usage_error(str(exc)) from None
    return wl, target


# --- tune --------------------------------------------------------------------------------

def _parse_tuner_options(items: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        name, eq, text = item.partition("=")
        if not eq or not name.strip():
            raise usage_error(f"bad --tuner-option {item!r}: expected NAME=VALUE")
        try:
            out[name.strip()] = json.loads(text)
        except json.JSONDecodeError:
            out[name.strip()] = text  # a bare word such as roulette
    return out


def _configure_tune(p: argparse.ArgumentParser) -> None:
    from autotune.search import DEFAULT_BATCH_SIZE, DEFAULT_TUNER, TUNERS

    _add_task(p)
    p.add_argument("--trials", type=int, default=200, help="measurements to make (default 200)")
    p.add_argument("--tuner", default=DEFAULT_TUNER, choices=list(TUNERS),
                   help=f"search strategy (default {DEFAULT_TUNER})")
    p.add_argument("--tuner-option", action="append", default=[], metavar="NAME=VALUE",
                   help="a tuner option, repeatable: --tuner-option pop_size=64")
    p.add_argument("--early-stopping", type=int, default=None, metavar="N",
                   help="stop after N trials without a new best (default: off)")
    p.add_argument("--batch-size", type=int, default=None, metavar="N",
                   help=f"configs measured per batch; the model is refit after each "
                   f"(default {DEFAULT_BATCH_SIZE})")
    p.add_argument("--seed", type=int, default=0, help="random seed of the tuner (default 0)")
    _add_ray_address(p)


def _add_ray_address(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ray-address", metavar="HOST:PORT", default=None,
                   help="measure on the workers of this Ray cluster (default: "
                        "$AUTOTUNE_RAY_ADDRESS, else this host); needs autotune[cluster]")


def _settings(**given: Any) -> "Settings":
    """The settings, with the command line's values (those given) over the environment's."""
    from autotune.settings import Settings

    return Settings(**{k: v for k, v in given.items() if v is not None})


def _run_tune(args: argparse.Namespace) -> int:
    from autotune.search import DEFAULT_BATCH_SIZE
    from autotune.search.options import resolve_options
    from autotune.search.registry import tuner_options

    wl, target = _task(args)
    options = _parse_tuner_options(args.tuner_option)
    if args.trials < 1:
        raise usage_error(f"--trials must be >= 1, got {args.trials}")
    if args.early_stopping is not None and args.early_stopping < 1:
        raise usage_error(f"--early-stopping must be >= 1, got {args.early_stopping}")
    batch = args.batch_size or DEFAULT_BATCH_SIZE
    if batch < 1:
        raise usage_error(f"--batch-size must be >= 1, got {batch}")
    try:
        resolve_options(args.tuner, tuner_options(args.tuner), options)
    except ValueError as exc:
        raise usage_error(str(exc)) from None
    return _tune_and_report(wl, target, _settings(ray_address=args.ray_address),
                            db=db_url(args), trials=args.trials, tuner=args.tuner,
                            tuner_options=options, early_stopping=args.early_stopping,
                            batch_size=batch, seed=args.seed)


def _tune_and_report(wl: "Workload", target: "Target", settings: "Settings",
                     **kwargs: Any) -> int:
    from autotune import config_space
    from autotune.api import default_executor, tune
    from autotune.measure.options import MeasureOptions
    from autotune.search.display import ProgressDisplay

    try:
        config_space(wl, target)
    except ValueError as exc:  # no template for this op on this target kind
        raise usage_error(str(exc)) from None
    options = MeasureOptions.from_settings(settings)
    try:
        executor = default_executor(target, options, settings=settings)
    except ImportError as exc:  # Ray asked for, not installed
        raise CliError(str(exc)) from None
    bar = ProgressDisplay(sys.stderr, PROG)
    where = f"the Ray cluster at {settings.ray_address}" if settings.ray_address else "this host"
    print(f"tuning {wl} on {target.key} ({where}): {kwargs['trials']} trials, tuner "
          f"{kwargs['tuner']}, database {shown(kwargs['db'])}", file=sys.stderr)
    try:
        result = tune(wl, target, callbacks=[bar], progress=False, measure_options=options,
                      executor=executor, **kwargs)
    finally:
        bar.finish()
        executor.close()
    _print_summary(wl, result)
    return 0 if result.ok else 1


def _print_summary(wl: "Workload", result: "TuneResult") -> None:
    errors = ", ".join(f"{kind} {n}" for kind, n in sorted(result.errors.items())) or "none"
    print(f"{result.trials} trials measured (stopped: {result.stopped}); errors: {errors}")
    if result.best_config is None:
        print(f"no valid config found for {wl}")
        return
    if result.retimed:
        flops = wl.flops()
        cells = [f"{r.config_index} {flops / r.first_cost / 1e9:.2f}->"
                 + (f"{flops / r.retimed_cost / 1e9:.2f}" if r.retimed_cost else r.error)
                 for r in result.retimed]
        head = result.retimed[0]
        verdict = {"ok": "ranks them", "noisy": "set aside: noisy",
                   "failed": "set aside: no valid re-run"}.get(head.status, head.status)
        slow = f", {head.ratio:.2f}x their first" if head.ratio is not None else ""
        print(f"re-timed together (config GFLOP/s first->re-timed; {verdict}{slow}, "
              f"{head.attempts} attempt(s)): {', '.join(cells)}")
    print(f"best: {result.best_gflops:.2f} GFLOP/s ({result.best_cost * 1e3:.4f} ms), "
          f"config {result.best_config.index}")
    print(json.dumps(result.best_config.to_dict()))


# --- queries -------------------------------------------------------------------------------

def _open_read(url: str) -> Any:
    from autotune.api import open_database

    return open_database(url, create=False)


def _run_best(args: argparse.Namespace) -> int:
    from autotune.api import best

    wl, target = _task(args)
    url = db_url(args)
    found = best(wl, target, db=url)
    if found is None:
        raise CliError(f"no valid record for {wl} on {target.key} in {shown(url)}")
    if args.json:
        print(json.dumps({"config": found.config.to_dict(), "gflops": found.gflops,
                          "cost": found.cost}))
        return 0
    print(f"{wl} on {target.key}: {found.gflops:.2f} GFLOP/s ({found.cost * 1e3:.4f} ms)")
    print(json.dumps(found.config.to_dict()))
    return 0


def _configure_best(p: argparse.ArgumentParser) -> None:
    _add_task(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")


_SORT_KEYS = {
    "id": lambda r: r.id or 0,
    "gflops": lambda r: -(r.gflops or 0.0),
    "cost": lambda r: r.cost if r.cost is not None else float("inf"),
}


def _configure_trials(p: argparse.ArgumentParser) -> None:
    _add_task(p)
    p.add_argument("--limit", type=int, default=20, help="rows to show; 0 for all (default 20)")
    p.add_argument("--sort", choices=list(_SORT_KEYS), default="id",
                   help="order: id (measurement order), gflops (fastest first) or cost")


def _run_trials(args: argparse.Namespace) -> int:
    wl, target = _task(args)
    with _open_read(db_url(args)) as db:
        records = [] if db is None else db.trials_for(wl, target)
    records.sort(key=_SORT_KEYS[args.sort])
    shown = records if args.limit <= 0 else records[: args.limit]
    rows = [[str(r.id), str(r.config_index), f"{r.gflops:.2f}" if r.gflops else "-",
             f"{r.cost * 1e3:.4f}" if r.cost else "-", r.error,
             "-" if r.job_id is None else str(r.job_id)] for r in shown]
    print(f"{wl} on {target.key}: {len(records)} trials")
    if rows:
        _print_table(["id", "config", "GFLOP/s", "ms", "error", "job"], rows)
    if len(shown) < len(records):
        print(f"(showing {len(shown)} of {len(records)}; --limit 0 shows all)")
    return 0


def _configure_export(p: argparse.ArgumentParser) -> None:
    _add_db(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="JSON-lines file to write; gzip-compressed when it ends in .gz")


def _run_export(args: argparse.Namespace) -> int:
    with _open_read(db_url(args)) as db:
        if db is None:
            raise CliError(f"database {shown(db_url(args))} does not exist")
        count = db.export_jsonl_path(args.output)
    print(f"exported {count} records to {args.output}")
    return 0


def _configure_import(p: argparse.ArgumentParser) -> None:
    _add_db(p)
    p.add_argument("file", help="JSON-lines file (plain or gzip) written by 'autotune export'; "
                                "every line is checked and cost/GFLOP/s recomputed from its "
                                "costs: the first bad line stops the import, nothing imported")


def _run_import(args: argparse.Namespace) -> int:
    from autotune.api import open_database

    with open_database(db_url(args)) as db:
        assert db is not None  # a URL with create=True always opens
        try:
            count = db.import_jsonl_path(args.file)
        except ValueError as exc:  # BadRecord names the line and field
            raise CliError(f"{args.file}: {exc}; nothing imported") from None
    print(f"imported {count} new records from {args.file}")
    return 0


def _run_ops(args: argparse.Namespace) -> int:
    from autotune.ops import EPILOGUE_STAGES, OPS

    rows = []
    for name, spec in OPS.items():
        params = " ".join(p.name if p.required else f"{p.name}={p.default}" for p in spec.params)
        rows.append([name, params, spec.doc])
    _print_table(["op", "parameters (=default)", "computes"], rows)
    print(f"epilogue stages: {', '.join(EPILOGUE_STAGES)}")
    return 0


def _configure_tuners(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the table the service's "
                                                       "/api/v1/tuners returns")


def _run_tuners(args: argparse.Namespace) -> int:
    from autotune.search.registry import describe_tuners

    tuners = describe_tuners()  # the service's /tuners reads the same tables
    if args.json:
        print(json.dumps(tuners, indent=2))
        return 0
    for tuner in tuners:
        mark = " (default)" if tuner["default"] else ""
        print(f"{tuner['name']}{mark}: {tuner['description']}")
        rows = [["  " + o["name"], json.dumps(o["default"]), _allowed(o), o["description"]]
                for o in tuner["options"]]
        if rows:
            _print_table(["  option", "default", "allowed", "description"], rows)
        print()
    print("set an option with: autotune tune ... --tuner NAME --tuner-option OPTION=VALUE")
    return 0


def _allowed(option: dict[str, Any]) -> str:
    """The values an option accepts: its choices, its bounds, or its type."""
    if "choices" in option:
        return "|".join(str(c) for c in option["choices"])
    if "minimum" in option or "maximum" in option:
        return f"{option.get('minimum', '')}..{option.get('maximum', '')}"
    return type(option["default"]).__name__


def _print_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())


# --- service ---------------------------------------------------------------------------------

def _configure_serve(p: argparse.ArgumentParser) -> None:
    from autotune.service.demo import DEMO_TRIALS

    _add_db(p)
    p.add_argument("--host", default=None,
                   help="bind address (default: $AUTOTUNE_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default: $AUTOTUNE_PORT or 8000)")
    p.add_argument("--demo", action="store_true",
                   help="tune a small CNN beside the service (a model run of 7 tasks, a few "
                        "minutes; unless the database holds it done) to watch on the dashboard")
    p.add_argument("--demo-trials", type=int, default=None, metavar="N",
                   help=f"trials of the demo's model run (default {DEMO_TRIALS})")
    _add_ray_address(p)


def _run_serve(args: argparse.Namespace) -> int:
    from autotune.service import run_local_demo, serve
    from autotune.service.demo import DEMO_TRIALS
    from autotune.service.serve import UnsafeBind

    if args.demo_trials is not None and (not args.demo or args.demo_trials < 1):
        raise usage_error("--demo-trials needs --demo and a count >= 1")
    settings = _settings(db_url=args.db, host=args.host, port=args.port,
                         ray_address=args.ray_address)
    try:
        if args.demo:
            run_local_demo(settings, trials=args.demo_trials or DEMO_TRIALS)
        else:
            serve(settings)
    except UnsafeBind as exc:
        raise usage_error(str(exc)) from None
    return 0


# --- cluster worker --------------------------------------------------------------------------

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
    from autotune.target import Target, host_cores

    options = MeasureOptions.from_settings(_settings())
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


def _configure_apikey(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = sub.add_parser("create", help="make a key and print it (its last line)")
    create.add_argument("--name", default="default", help="a label for the key")
    sub.add_parser("list", help="list keys (names and prefixes, never the keys)")
    revoke = sub.add_parser("revoke", help="revoke a key by its display prefix or the key")
    revoke.add_argument("prefix", help="the prefix 'apikey list' shows, or the whole key "
                                       "(when several active keys share the prefix)")
    for q in sub.choices.values():
        _add_db(q)


def _run_apikey(args: argparse.Namespace) -> int:
    from autotune.api import open_database

    with open_database(db_url(args)) as db:
        assert db is not None  # a URL with create=True always opens
        if args.action == "create":
            key = db.create_api_key(args.name)
            print(f"API key {args.name!r} created; it is shown only now:", file=sys.stderr)
            print(key)
        elif args.action == "list":
            rows = [[k.prefix, k.name, k.created_at.isoformat(timespec="seconds"),
                     "revoked" if k.revoked else "active"] for k in db.list_api_keys()]
            _print_table(["prefix", "name", "created", "state"], rows)
        else:
            from autotune.db.apikeys import AmbiguousKeyPrefix

            try:
                count = db.revoke_api_key(args.prefix)
            except AmbiguousKeyPrefix as exc:
                raise usage_error(f"{exc}; nothing revoked") from None
            if count == 0:
                raise CliError(f"no active key with prefix {args.prefix!r}")
            print(f"revoked {count} key")
    return 0


COMMANDS: tuple[Command, ...] = (
    Command("tune", "tune an operator workload and record every trial", _configure_tune,
            _run_tune),
    Command("best", "print the best recorded config of a workload", _configure_best, _run_best),
    Command("trials", "list the recorded trials of a workload", _configure_trials, _run_trials),
    Command("export", "write tuning records to a JSON-lines file", _configure_export,
            _run_export),
    Command("import", "read tuning records from a JSON-lines file", _configure_import,
            _run_import),
    Command("ops", "list the operators and their parameters", lambda p: None, _run_ops),
    Command("tuners", "list the tuners and their options (defaults, bounds)", _configure_tuners,
            _run_tuners),
    Command("serve", "serve the REST API and the dashboard", _configure_serve, _run_serve),
    Command("apikey", "create, list or revoke API keys of the service", _configure_apikey,
            _run_apikey),
    Command("worker", "join a Ray cluster and measure on this host's devices",
            _configure_worker, _run_worker),
    Command("tune-model", "tune every operator of a PyTorch model under one budget",
            _models.configure_tune_model, _models.run_tune_model),
    Command("bench-model", "time a PyTorch model on torch and on its tuned kernels",
            _models.configure_bench_model, _models.run_bench_model),
)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser with one subparser per command."""
    from autotune import __version__

    parser = _Parser(prog=PROG, description="Learned-cost-model autotuning of tensor operators.")
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in commands:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.configure(p)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line ``argv`` (default: sys.argv[1:]); returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors (already printed)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return args._run(args)
    except CliError as exc:
        return _fail(str(exc), exc.code)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except Exception as exc:  # failures of the environment, not bugs: one line each
        found = _environment_error(exc)
        if found is None:
            raise
        return _fail(*found)


def _environment_error(exc: Exception) -> Optional[tuple[str, int]]:
    """(one-line message, status) for a database, network or file failure; None otherwise."""
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from autotune.api import ServiceError

    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, ArgumentError):
        return f"bad database URL: {first}", 2
    if isinstance(exc, SQLAlchemyError):
        return f"database error: {first}", 1
    if isinstance(exc, (ServiceError, OSError)):
        return first, 1
    return None


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
