"""The `autotune` command: tune, query and move tuning records from a shell.

Each subcommand is a `Command` (a name, a help line, a function adding its arguments and a
function running it, returning the exit status), one module per group of commands:
`tuning` (tune, best, trials, export, import), `info` (ops, tuners), `serve` (serve,
apikey), `worker`, `models` (tune-model, bench-model). User mistakes print one line
``autotune: error: ...`` and exit 2 (usage) or 1 (a failure such as an unreachable db).
"""
from __future__ import annotations

import argparse
import sys
from typing import NoReturn, Optional, Sequence

from autotune import __version__
from autotune.cli import info, models, serve, tuning, worker
from autotune.cli.common import PROG, CliError, Command


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line instead of argparse's usage block; --help shows the usage.
        hint = self.prog if self.prog.startswith(PROG) else PROG
        self.exit(2, f"{PROG}: error: {message} (see '{hint} --help')\n")


COMMANDS: tuple[Command, ...] = (*tuning.COMMANDS, *info.COMMANDS, *serve.COMMANDS,
                                  *worker.COMMANDS, *models.COMMANDS)


def build_parser(commands: Sequence[Command] = COMMANDS) -> argparse.ArgumentParser:
    """The argument parser with one subparser per command."""
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
    from pydantic import ValidationError
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from autotune.api import ServiceError

    if isinstance(exc, ValidationError) and exc.title == "Settings":
        error = exc.errors()[0]
        name = "_".join(str(part) for part in error["loc"]).upper()
        return f"bad setting AUTOTUNE_{name}: {error['msg']}", 2
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
