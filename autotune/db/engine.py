"""Engine construction: SQLite pragmas and transactions, PostgreSQL via psycopg 3."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.pool import StaticPool

SQLITE_BUSY_TIMEOUT_MS = 30_000


def _json_default(obj: Any) -> Any:
    # Backends put numpy scalars/arrays into ``extra``; store them as plain JSON.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_json_default)


def normalize_url(url: str) -> str:
    """Route bare ``postgresql://`` URLs to psycopg 3 (the only PostgreSQL driver we ship);
    a plain file path (no ``scheme:``) names a SQLite file."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    if url and not re.match(r"^[A-Za-z][A-Za-z0-9+.-]+:", url):  # a drive letter (C:) is a path
        return f"sqlite:///{Path(url).expanduser().absolute()}"
    return url


def masked_url(url: str) -> str:
    """``url`` with its password shown as ``***`` (for logs and messages)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        # not a URL SQLAlchemy parses: hide whatever sits between ':' and '@'
        return re.sub(r"(//[^/:@]*:)[^@/]*@", r"\1***@", url)


def make_engine(url: str) -> Engine:
    """An Engine for ``url``; SQLite gets WAL, foreign keys, a busy timeout and real BEGINs."""
    url = normalize_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, json_serializer=_dumps, pool_pre_ping=True)

    database = parsed.database or ""
    in_memory = database in ("", ":memory:") or database.startswith("file::memory:")
    if not in_memory:
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
    if in_memory:
        # One shared connection, or every connection would see its own empty database.
        kwargs["poolclass"] = StaticPool
    engine = create_engine(url, json_serializer=_dumps, **kwargs)
    _install_sqlite_hooks(engine, wal=not in_memory)
    return engine


def _install_sqlite_hooks(engine: Engine, *, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # pysqlite's implicit transactions skip DDL; take control so migrations are atomic.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys = ON")
        if wal:
            cur.execute("PRAGMA journal_mode = WAL")
            # Safe with WAL (only the last commit can be lost on power failure) and much faster.
            cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        # ``sqlite_begin="IMMEDIATE"`` takes the write lock up front (used by migrations).
        mode = conn.get_execution_options().get("sqlite_begin", "")
        conn.exec_driver_sql(f"BEGIN {mode}".strip())
