"""Engine construction: SQLite pragmas and transactions, PostgreSQL via psycopg 3 with a
bound on how long a writing transaction may sit idle."""
from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.pool import StaticPool

from autotune.db.url import checked_url, sqlite_busy_timeout_s


def _json_default(obj: Any) -> Any:
    # Backends put numpy scalars/arrays into ``extra``; store them as plain JSON.
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_json_default)


def make_engine(url: str) -> Engine:
    """An Engine for ``url`` (`DatabaseUrlError` for one it cannot use); SQLite gets WAL,
    foreign keys, a busy timeout and real BEGINs."""
    url = checked_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        engine = create_engine(url, json_serializer=_dumps, pool_pre_ping=True)
        _install_postgres_hooks(engine)
        return engine

    database = parsed.database or ""
    in_memory = database in ("", ":memory:") or database.startswith("file::memory:")
    kwargs: dict[str, Any] = {"connect_args": {"check_same_thread": False}}
    if in_memory:
        # One shared connection, or every connection would see its own empty database.
        kwargs["poolclass"] = StaticPool
    engine = create_engine(url, json_serializer=_dumps, **kwargs)
    _install_sqlite_hooks(engine, wal=not in_memory,
                          busy_timeout_ms=round(sqlite_busy_timeout_s(parsed) * 1000))
    return engine


# A process frozen (SIGSTOP, a hung host, a debugger) between a write and its commit holds its
# row locks for as long as it is frozen: claimers skip locked rows, so its job would never be
# taken over however long ago its lease ran out. PostgreSQL ends a writing transaction left
# idle this long (its locks go with it), unless the server, role or URL
# (``?options=-c idle_in_transaction_session_timeout=...``) already sets a bound. Readers
# are left unbounded: they lock no rows, and an export may wait on a slow consumer.
IDLE_IN_TRANSACTION_TIMEOUT = "60s"
# The execution option that marks a writing transaction (`Store.session(write=True)`).
WRITER = "autotune_writer"


def _install_postgres_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        with dbapi_conn.cursor() as cur:
            cur.execute("SHOW idle_in_transaction_session_timeout")
            row = cur.fetchone()
        dbapi_conn.rollback()  # SHOW began a transaction
        record.info["idle_bound_set"] = row is not None and row[0] != "0"

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.get_execution_options().get(WRITER) and \
                not conn.connection.info.get("idle_bound_set"):
            conn.exec_driver_sql("SET LOCAL idle_in_transaction_session_timeout = "
                                 f"'{IDLE_IN_TRANSACTION_TIMEOUT}'")


def _install_sqlite_hooks(engine: Engine, *, wal: bool, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # pysqlite's implicit transactions skip DDL; take control so migrations are atomic.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
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
