"""`autotune tune`, `best`, `trials`, `export` and `import`: tune a workload, move its
records."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, Sequence

from autotune.cli.common import (
    PROG,
    CliError,
    Command,
    add_db,
    add_ray_address,
    add_task,
    db_url,
    print_table,
    refuse_unmeasurable,
    settings_of,
    shown,
    task_of,
    usage_error,
)

if TYPE_CHECKING:
    from autotune.ops import Workload
    from autotune.search import TuneResult
    from autotune.settings import Settings
    from autotune.target import Target


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

    add_task(p)
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
    add_ray_address(p)


def _run_tune(args: argparse.Namespace) -> int:
    from autotune.search import DEFAULT_BATCH_SIZE
    from autotune.search.options import resolve_options
    from autotune.search.registry import tuner_options

    wl, target = task_of(args)
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
    return _tune_and_report(wl, target, settings_of(ray_address=args.ray_address),
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
    refuse_unmeasurable(target, settings)
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
    from autotune.search.explain import lines

    for line in lines(result):
        print(line)
    if result.best_config is None:
        print(f"no valid config found for {wl}")
        return
    print(json.dumps(result.best_config.to_dict()))


def _open_read(url: str) -> Any:
    from autotune.api import open_database

    return open_database(url, create=False)


def _run_best(args: argparse.Namespace) -> int:
    from autotune.api import best

    wl, target = task_of(args)
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
    add_task(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")


_SORT_KEYS = {
    "id": lambda r: r.id or 0,
    "gflops": lambda r: -(r.gflops or 0.0),
    "cost": lambda r: r.cost if r.cost is not None else float("inf"),
}


def _configure_trials(p: argparse.ArgumentParser) -> None:
    add_task(p)
    p.add_argument("--limit", type=int, default=20, help="rows to show; 0 for all (default 20)")
    p.add_argument("--sort", choices=list(_SORT_KEYS), default="id",
                   help="order: id (measurement order), gflops (fastest first) or cost")


def _run_trials(args: argparse.Namespace) -> int:
    wl, target = task_of(args)
    with _open_read(db_url(args)) as db:
        records = [] if db is None else db.trials_for(wl, target)
    records.sort(key=_SORT_KEYS[args.sort])
    shown = records if args.limit <= 0 else records[: args.limit]
    rows = [[str(r.id), str(r.config_index), f"{r.gflops:.2f}" if r.gflops else "-",
             f"{r.cost * 1e3:.4f}" if r.cost else "-", r.error,
             "-" if r.job_id is None else str(r.job_id)] for r in shown]
    print(f"{wl} on {target.key}: {len(records)} trials")
    if rows:
        print_table(["id", "config", "GFLOP/s", "ms", "error", "job"], rows)
    if len(shown) < len(records):
        print(f"(showing {len(shown)} of {len(records)}; --limit 0 shows all)")
    return 0


def _configure_export(p: argparse.ArgumentParser) -> None:
    add_db(p)
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
    add_db(p)
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


COMMANDS: tuple[Command, ...] = (
    Command("tune", "tune an operator workload and record every trial", _configure_tune,
            _run_tune),
    Command("best", "print the best recorded config of a workload", _configure_best, _run_best),
    Command("trials", "list the recorded trials of a workload", _configure_trials, _run_trials),
    Command("export", "write tuning records to a JSON-lines file", _configure_export,
            _run_export),
    Command("import", "read tuning records from a JSON-lines file", _configure_import,
            _run_import),
)
