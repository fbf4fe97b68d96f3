"""Run the Alembic migrations programmatically, safely from several processes at once."""
from __future__ import annotations

import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text
from sqlalchemy.exc import DBAPIError

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# Arbitrary but fixed: every process migrating a PostgreSQL database queues on this lock.
_PG_LOCK_ID = 0x6175746F  # "auto"
_RETRIES = 5


def alembic_config() -> Config:
    """An Alembic config pointing at the packaged migrations (no ini file, cwd-independent)."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    return cfg


def head_revision() -> str:
    """The newest revision shipped with this package."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migrations found"
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (None: never migrated).

    Read from alembic's table directly: `/health` asks every second, and alembic's migration
    context would log two INFO lines each time."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def _upgrade_once(engine: Engine, revision: str) -> None:
    options = {"sqlite_begin": "IMMEDIATE"} if engine.dialect.name == "sqlite" else {}
    with engine.connect().execution_options(**options) as conn:
        with conn.begin():
            _lock(conn)
            cfg = alembic_config()
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)


def _lock(conn: Connection) -> None:
    # SQLite: BEGIN IMMEDIATE already holds the write lock. PostgreSQL: a transaction-scoped
    # advisory lock, so a second process waits and then finds the schema at head.
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _PG_LOCK_ID})


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database to ``revision``, retrying a lost race with another migrator."""
    for attempt in range(_RETRIES):
        try:
            _upgrade_once(engine, revision)
            return
        except DBAPIError as exc:
            message = str(exc.orig).lower()
            transient = ("already exists" in message or "locked" in message
                         or "duplicate" in message)
            if not transient or attempt == _RETRIES - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
