"""API keys: generated once, stored only as a SHA-256 hash, revocable by the key itself or
by a display prefix that names one active key."""
from __future__ import annotations

import hashlib
import secrets
from typing import Any, cast

from sqlalchemy import CursorResult, func, select, update
from sqlalchemy.orm import Session

from autotune.db.schema import ApiKeyRow, utcnow
from autotune.db.values import ApiKeyRecord, api_key_record

KEY_PREFIX = "at_"
DISPLAY_CHARS = 8


def hash_key(key: str) -> str:
    """The stored form of a key (hex SHA-256; the key is 256 random bits, so no salt is needed)."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def create_api_key(session: Session, *, name: str) -> str:
    """Store a new key under ``name``; returns the key itself, which is not kept."""
    key = new_key()
    session.add(ApiKeyRow(name=name, key_hash=hash_key(key), prefix=key[:DISPLAY_CHARS],
                          created_at=utcnow(), revoked=False))
    session.flush()
    return key


def verify_api_key(session: Session, *, key: str) -> bool:
    """Whether ``key`` is a stored, unrevoked key."""
    if not key:
        return False
    stmt = select(ApiKeyRow.id).where(ApiKeyRow.key_hash == hash_key(key),
                                      ApiKeyRow.revoked.is_(False))
    return session.execute(stmt).first() is not None


def list_api_keys(session: Session) -> list[ApiKeyRecord]:
    """All keys (revoked ones included), oldest first."""
    rows = session.scalars(select(ApiKeyRow).order_by(ApiKeyRow.id))
    return [api_key_record(row) for row in rows]


class AmbiguousKeyPrefix(ValueError):
    """A display prefix shared by several active keys: revoking by it would revoke them all."""

    def __init__(self, prefix: str, count: int) -> None:
        super().__init__(f"prefix {prefix!r} matches {count} active keys; give the whole key "
                         f"to revoke one of them")
        self.prefix, self.count = prefix, count


def revoke_api_key(session: Session, *, prefix: str) -> int:
    """Revoke the active key that ``prefix`` names (its display prefix, or the whole key);
    returns how many were revoked (0 or 1). `AmbiguousKeyPrefix` when several match."""
    if len(prefix) > DISPLAY_CHARS:  # the whole key: its hash names exactly one
        where = ApiKeyRow.key_hash == hash_key(prefix)
    else:
        where = ApiKeyRow.prefix == prefix
    active = (where, ApiKeyRow.revoked.is_(False))
    count = int(session.scalar(select(func.count()).select_from(ApiKeyRow).where(*active)) or 0)
    if count > 1:
        raise AmbiguousKeyPrefix(prefix, count)
    done = session.execute(update(ApiKeyRow).where(*active).values(revoked=True))
    return int(cast("CursorResult[Any]", done).rowcount or 0)  # an UPDATE's result is a cursor
