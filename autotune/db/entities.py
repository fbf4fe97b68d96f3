"""Workload and target rows: get-or-create by key, and dialect-neutral INSERT-or-skip."""
from __future__ import annotations

from typing import Any, Optional

from sqlalchemy import Table, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from autotune.db.schema import TargetRow, WorkloadRow, utcnow


def insert_ignore(session: Session, table: Table,
                  index_elements: Optional[list[str]] = None) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING`` for ``table`` in the session's dialect."""
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=index_elements)
    if dialect == "sqlite":
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=index_elements)
    raise NotImplementedError(f"unsupported database dialect {dialect!r}")


def target_kind_of(key: str) -> str:
    """A target's kind from its key (the first word: ``llvm -mcpu=...`` -> ``llvm``)."""
    return key.split(maxsplit=1)[0] if key.strip() else ""


def ensure_workload(session: Session, *, key: str, op: str) -> int:
    """The id of the workload row with ``key``, inserting it when new (race-free)."""
    found = workload_id(session, key=key)
    if found is not None:
        return found
    stmt = insert_ignore(session, WorkloadRow.__table__, ["key"])  # type: ignore[arg-type]
    session.execute(stmt, {"key": key, "op": op, "created_at": utcnow()})
    return session.execute(select(WorkloadRow.id).where(WorkloadRow.key == key)).scalar_one()


def ensure_target(session: Session, *, key: str, kind: str) -> int:
    """The id of the target row with ``key``, inserting it when new (race-free)."""
    found = target_id(session, key=key)
    if found is not None:
        return found
    stmt = insert_ignore(session, TargetRow.__table__, ["key"])  # type: ignore[arg-type]
    session.execute(stmt, {"key": key, "kind": kind})
    return session.execute(select(TargetRow.id).where(TargetRow.key == key)).scalar_one()


def workload_id(session: Session, *, key: str) -> Optional[int]:
    """The id of an existing workload row, or None."""
    stmt = select(WorkloadRow.id).where(WorkloadRow.key == key)
    return session.execute(stmt).scalar_one_or_none()


def target_id(session: Session, *, key: str) -> Optional[int]:
    """The id of an existing target row, or None."""
    return session.execute(select(TargetRow.id).where(TargetRow.key == key)).scalar_one_or_none()
