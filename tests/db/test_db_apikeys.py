"""API keys: created once, stored hashed, verified, revoked by prefix."""
from __future__ import annotations

import hashlib

from sqlalchemy import text

from autotune.db import Database


def test_create_verify_revoke(db: Database) -> None:
    key = db.create_api_key("ci")
    other = db.create_api_key("dashboard")
    assert key.startswith("at_") and len(key) > 40 and key != other
    assert db.verify_api_key(key) and db.verify_api_key(other)
    assert not db.verify_api_key(key + "x") and not db.verify_api_key("")

    listed = db.list_api_keys()
    assert [(k.name, k.prefix, k.revoked) for k in listed] == [
        ("ci", key[:8], False), ("dashboard", other[:8], False)]

    assert db.revoke_api_key(key[:8]) == 1
    assert not db.verify_api_key(key) and db.verify_api_key(other)
    assert db.revoke_api_key(key[:8]) == 0  # already revoked
    assert [k.revoked for k in db.list_api_keys()] == [True, False]


def test_key_is_not_stored_in_clear(db: Database) -> None:
    key = db.create_api_key("secret")
    with db.engine.connect() as conn:
        rows = conn.execute(text("SELECT name, key_hash, prefix FROM api_keys")).all()
    dumped = repr(rows)
    assert key not in dumped and key[8:] not in dumped
    assert rows[0].key_hash == hashlib.sha256(key.encode()).hexdigest()
