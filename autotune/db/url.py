"""Database URLs: the forms the tuning database takes, and one line naming the URL and the
fix for each it cannot use (the CLI, `serve`, the library and the service all check here).

The database is SQLite (``sqlite:///path``, or a plain path; ``?timeout=S`` sets how long a
writer waits on another's lock, 30 s by default) or PostgreSQL (``postgresql://user@host/db``,
through psycopg 3).
"""
from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

DIALECTS = ("sqlite", "postgresql")
FORMS = "sqlite:///path/to/file.db, a plain file path, or postgresql://user@host/dbname"
# A writer waits this long for another's lock before "database is locked"; long enough to
# outlast a large `autotune import`'s transaction.
SQLITE_BUSY_TIMEOUT_S = 30.0
MAX_SQLITE_BUSY_TIMEOUT_S = 3600.0
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")  # two letters at least: C: is a path


class DatabaseUrlError(ValueError):
    """A database URL the tuning database cannot use; the message names it and the fix."""


def normalize_url(url: str) -> str:
    """Route bare ``postgresql://`` URLs to psycopg 3 (the only PostgreSQL driver we ship);
    a plain file path (no ``scheme:``) names a SQLite file."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url and not _SCHEME.match(url):
        return f"sqlite:///{Path(url).expanduser().absolute()}"
    return url


def masked_url(url: str) -> str:
    """``url`` with its password shown as ``***`` (for logs and messages)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        # not a URL SQLAlchemy parses: hide whatever sits between ':' and '@'
        return re.sub(r"(//[^/:@]*:)[^@/]*@", r"\1***@", url)


def checked_url(url: str) -> str:
    """``url`` normalized (`normalize_url`), or `DatabaseUrlError` for an unsupported
    dialect, a driver that is not installed, a malformed URL or a SQLite file whose
    directory does not exist."""
    shown = masked_url(url)
    if not url.strip():
        raise DatabaseUrlError(f"database URL is empty: give {FORMS}")
    normalized = normalize_url(url)
    scheme = _SCHEME.match(normalized)
    dialect = scheme.group(1).split("+")[0].lower() if scheme else ""
    if dialect not in DIALECTS:
        near = difflib.get_close_matches(dialect, DIALECTS, n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise DatabaseUrlError(f"database URL {shown!r}: dialect {dialect!r} is not "
                               f"supported{hint}; use {FORMS}")
    try:
        parsed = make_url(normalized)
    except ArgumentError:
        hint = _form_hint(normalized)
        raise DatabaseUrlError(f"database URL {shown!r} is malformed: {hint}") from None
    _check_driver(parsed, shown)
    if dialect == "sqlite":
        _check_directory(parsed, shown)
        sqlite_busy_timeout_s(parsed, shown)
    return normalized


def sqlite_busy_timeout_s(parsed: URL, shown: str = "") -> float:
    """How long a SQLite connection waits on another's write lock: the URL's ``?timeout=S``
    (what Python's sqlite3 calls it), else `SQLITE_BUSY_TIMEOUT_S`."""
    raw = parsed.query.get("timeout")
    if raw is None:
        return SQLITE_BUSY_TIMEOUT_S
    text = raw if isinstance(raw, str) else raw[-1]
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds <= MAX_SQLITE_BUSY_TIMEOUT_S:  # also false for nan
        raise DatabaseUrlError(
            f"database URL {shown or masked_url(str(parsed))!r}: timeout={text!r} is not a "
            f"number of seconds in (0, {MAX_SQLITE_BUSY_TIMEOUT_S:g}]")
    return seconds


def _form_hint(url: str) -> str:
    rest = url.split(":", 1)[1]
    if url.lower().startswith("sqlite:") and not rest.startswith("//"):
        path = rest or "/path/to/file.db"
        return f"write sqlite:///{path} (three slashes, then the path), or the plain path {path}"
    return f"use {FORMS}"


def _check_driver(parsed: URL, shown: str) -> None:
    try:
        dialect = parsed.get_dialect()
    except ArgumentError:  # NoSuchModuleError: no such driver for the dialect
        raise DatabaseUrlError(
            f"database URL {shown!r}: SQLAlchemy has no driver {parsed.get_driver_name()!r} for "
            f"{parsed.get_backend_name()}; use {FORMS}") from None
    try:
        dialect.import_dbapi()
    except ImportError as exc:
        module = exc.name or parsed.get_driver_name()
        raise DatabaseUrlError(
            f"database URL {shown!r}: its driver {module!r} is not installed; install it "
            f"(pip install {module}) or use {FORMS}") from None


def _check_directory(parsed: URL, shown: str) -> None:
    name = parsed.database or ""
    if name in ("", ":memory:") or name.startswith("file:"):
        return
    folder = Path(name).expanduser().parent
    if folder.is_dir():
        return
    where = "" if folder.is_absolute() else (
        f" (relative to the current directory {os.getcwd()}; sqlite:////{name} names "
        f"/{name})")
    raise DatabaseUrlError(f"database URL {shown!r}: directory {folder} does not exist{where}; "
                           f"create it first (mkdir -p {folder})")
