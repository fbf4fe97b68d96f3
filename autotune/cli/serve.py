"""`autotune serve` and `autotune apikey`: the REST service and its keys."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from autotune.cli.common import (
    CliError,
    Command,
    add_db,
    add_ray_address,
    db_url,
    print_table,
    settings_of,
    usage_error,
)

if TYPE_CHECKING:
    pass


def _configure_serve(p: argparse.ArgumentParser) -> None:
    from autotune.service.demo import DEMO_TRIALS

    add_db(p)
    p.add_argument("--host", default=None,
                   help="bind address (default: $AUTOTUNE_HOST or 127.0.0.1)")
    p.add_argument("--port", type=int, default=None, help="port (default: $AUTOTUNE_PORT or 8000)")
    p.add_argument("--demo", action="store_true",
                   help="tune a small CNN beside the service (a model run of 7 tasks, a few "
                        "minutes; unless the database holds it done) to watch on the dashboard")
    p.add_argument("--demo-trials", type=int, default=None, metavar="N",
                   help=f"trials of the demo's model run (default {DEMO_TRIALS})")
    add_ray_address(p)


def _run_serve(args: argparse.Namespace) -> int:
    from autotune.service.demo import DEMO_TRIALS
    from autotune.service.serve import UnsafeBind, run_local_demo, serve

    if args.demo_trials is not None and (not args.demo or args.demo_trials < 1):
        raise usage_error("--demo-trials needs --demo and a count >= 1")
    db_url(args)  # a database URL it cannot use: one line, as every command says it
    settings = settings_of(db_url=args.db, host=args.host, port=args.port,
                           ray_address=args.ray_address)
    try:
        if args.demo:
            run_local_demo(settings, trials=args.demo_trials or DEMO_TRIALS)
        else:
            serve(settings)
    except UnsafeBind as exc:
        raise usage_error(str(exc)) from None
    return 0


def _configure_apikey(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    create = sub.add_parser("create", help="make a key and print it (its last line)")
    create.add_argument("--name", default="default", help="a label for the key")
    sub.add_parser("list", help="list keys (names and prefixes, never the keys)")
    revoke = sub.add_parser("revoke", help="revoke a key by its display prefix or the key")
    revoke.add_argument("prefix", help="the prefix 'apikey list' shows, or the whole key "
                                       "(when several active keys share the prefix)")
    for q in sub.choices.values():
        add_db(q)


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
            print_table(["prefix", "name", "created", "state"], rows)
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
    Command("serve", "serve the REST API and the dashboard", _configure_serve, _run_serve),
    Command("apikey", "create, list or revoke API keys of the service", _configure_apikey,
            _run_apikey),
)
