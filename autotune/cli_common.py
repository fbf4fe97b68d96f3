"""What the CLI's command modules share (`autotune.cli`, `autotune.frontend.cli`): the
user-facing error, and the database URL a command uses and prints."""
from __future__ import annotations

import argparse


class CliError(Exception):
    """A user-facing failure: printed as one line, exits with ``code``."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def usage_error(message: str) -> CliError:
    """A mistake in the command line (exit status 2)."""
    return CliError(message, 2)


def db_url(args: argparse.Namespace) -> str:
    """``--db``, else the settings' database URL (AUTOTUNE_DB_URL)."""
    from autotune.settings import Settings

    return args.db or Settings().db_url


def shown(url: str) -> str:
    """A database URL as printed: its password masked."""
    from autotune.db.engine import masked_url

    return masked_url(url)
