"""`Store`: one database engine and its sessions, the base of the stores by concern
(`RecordStore`, `JobStore`; `Database` is both)."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from autotune.db import migrate
from autotune.db.engine import WRITER, make_engine
from autotune.db.entities import ensure_target, ensure_workload
from autotune.db.url import normalize_url
from autotune.db.values import (
    TargetLike,
    WorkloadLike,
)
from autotune.settings import Settings

_S = TypeVar("_S", bound="Store")


class Store:
    """One engine and its sessions at ``url`` (default: ``Settings().db_url``, read at
    construction; a SQLite file unless set; ``postgresql+psycopg://`` at scale), and the
    workload and target rows every concern shares.

    Constructing connects lazily and changes nothing; ``upgrade()`` (or ``open``) brings the
    schema to the newest migration.
    """

    def __init__(self, url: Optional[str] = None) -> None:
        self.url = normalize_url(Settings().db_url if url is None else url)
        self.engine = make_engine(self.url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # Writers take SQLite's write lock when they begin: a deferred transaction that reads
        # and then writes fails at once ("database is locked") if another connection
        # committed in between, whatever the busy timeout. PostgreSQL ignores the option.
        # On PostgreSQL they end if left idle (`engine.IDLE_IN_TRANSACTION_TIMEOUT`).
        self._write_sessions = sessionmaker(
            self.engine.execution_options(sqlite_begin="IMMEDIATE", **{WRITER: True}),
            expire_on_commit=False)
        # Committed (key -> id) rows; ids never change, so the cache is never stale.
        self._workload_ids: dict[str, int] = {}
        self._target_ids: dict[str, int] = {}

    @classmethod
    def open(cls: type[_S], url: Optional[str] = None) -> _S:
        """Connect and migrate to head (idempotent; safe from concurrent processes)."""
        db = cls(url)
        db.upgrade()
        return db

    def upgrade(self, revision: str = "head") -> None:
        """Run the Alembic migrations up to ``revision``."""
        migrate.upgrade(self.engine, revision)

    def revision(self) -> Optional[str]:
        """The schema revision the database is at (None: not migrated)."""
        return migrate.current_revision(self.engine)

    @contextmanager
    def session(self, *, write: bool = False) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on error.
        ``write=True`` for transactions that write (they queue for the lock on SQLite)."""
        maker = self._write_sessions if write else self._sessions
        with maker() as session, session.begin():
            yield session

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Database({self.engine.url.render_as_string(hide_password=True)!r})"

    def _ids(self, session: Session, workload: WorkloadLike, target: TargetLike) -> tuple[int, int]:
        wid = self._workload_ids.get(workload.key)
        if wid is None:
            wid = ensure_workload(session, key=workload.key, op=workload.op)
        tid = self._target_ids.get(target.key)
        if tid is None:
            tid = ensure_target(session, key=target.key, kind=target.kind)
        return wid, tid

    def _remember(self, workload: WorkloadLike, target: TargetLike, ids: tuple[int, int]) -> None:
        # Called after commit only: an id from a rolled-back insert must not be cached.
        self._workload_ids[workload.key], self._target_ids[target.key] = ids

