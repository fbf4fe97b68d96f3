"""Fixtures shared by the test directories: a PostgreSQL database for this test session.

PostgreSQL comes from scripts/start-postgres.sh (URL in AUTOTUNE_TEST_PG_URL, or its default).
Unreachable: the tests that need it skip, or fail when CI=true.
"""
from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest
from sqlalchemy.engine import make_url

from autotune.db import Database

PG_DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:54329/autotune_test"
TABLES = ("trials", "jobs", "model_runs", "api_keys", "workloads", "targets")
_WORKER_TMP = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Each pytest-xdist process, and every process it starts, gets a temporary directory of
    its own, and with it a host CPU lock of its own (`autotune.measure.host_lock`): the
    processes' tests check what a job does, not how fast its kernels run, so they need not
    take turns timing. The tests that time (marked serial) run alone, on the host's lock."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getppid()))
    path = Path(tempfile.gettempdir()) / f"autotune-tests-{run[:12]}-{worker}"
    path.mkdir(exist_ok=True)
    config.stash[_WORKER_TMP] = path
    os.environ["TMPDIR"] = str(path)
    tempfile.tempdir = None  # read TMPDIR again


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(_WORKER_TMP, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def _conninfo(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database for this test session (dropped afterwards)."""
    psycopg = pytest.importorskip("psycopg")
    server_url = os.environ.get("AUTOTUNE_TEST_PG_URL", PG_DEFAULT_URL)
    try:
        admin = psycopg.connect(_conninfo(server_url), autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        reason = (f"PostgreSQL not reachable at {server_url}: {str(exc).strip()}; "
                  "start it with scripts/start-postgres.sh")
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    # A database of our own: concurrent test runs on the same server must not collide.
    name = f"autotune_test_{os.getpid()}_{secrets.token_hex(4)}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
        try:
            Database.open(url).dispose()
            yield url
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def fresh_pg_url(pg_url: str) -> str:
    """``pg_url`` migrated to head and emptied (a test before may have left rows or dropped
    the schema)."""
    db = Database(pg_url)
    try:
        db.upgrade()
        with db.engine.begin() as conn:
            conn.exec_driver_sql(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
    finally:
        db.dispose()
    return pg_url
