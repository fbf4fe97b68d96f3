"""Migrations, engine settings and concurrent opening."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from autotune.db import Database
from autotune.db.migrate import head_revision
from autotune.db.schema import Base

TABLES = {"workloads", "targets", "jobs", "trials", "api_keys", "alembic_version"}
REPO = Path(__file__).resolve().parents[2]


def _drop_schema(db: Database) -> None:
    with db.engine.begin() as conn:
        conn.exec_driver_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public")


def test_migrations_create_the_schema(db_url: str) -> None:
    db = Database(db_url)
    try:
        if db.engine.dialect.name == "postgresql":
            _drop_schema(db)
            assert db.revision() is None
        db.upgrade()
        assert db.revision() == head_revision()
        assert TABLES <= set(inspect(db.engine).get_table_names())
        # The hand-written migration and the ORM models describe the same schema.
        with db.engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        indexes = {ix["name"] for ix in inspect(db.engine).get_indexes("trials")}
        assert "ix_trials_best" in indexes
    finally:
        db.dispose()


def test_0005_restores_first_measurements_pooled_by_the_old_retiming(db_url: str,
                                                                      tmp_path: Path) -> None:
    """Records re-timed before 0005 had their first and re-timed repeats pooled into one
    median (issue 29: 2.4 ms re-runs pooled with 1.2 ms first ones); 0005 restores the first."""
    db = Database(db_url if db_url.startswith("postgresql") else f"sqlite:///{tmp_path}/0004.db")
    try:
        if db.engine.dialect.name == "postgresql":
            _drop_schema(db)
        db.upgrade("0004")
        first, again = [1.17e-3, 1.18e-3, 1.2e-3], [2.36e-3, 2.38e-3, 2.4e-3]
        pooled = sorted(first + again)
        cost = (pooled[2] + pooled[3]) / 2
        flops = 2 * 512**3
        with db.engine.begin() as conn:
            wid = conn.execute(text("INSERT INTO workloads (key, op, created_at) VALUES "
                                    "('w', 'matmul', CURRENT_TIMESTAMP) RETURNING id")).scalar()
            tid = conn.execute(text("INSERT INTO targets (key, kind) VALUES ('llvm', 'llvm') "
                                    "RETURNING id")).scalar()
            for key, costs, extra in (
                    ("1", pooled, {"first_costs": first, "retimed_costs": again}),
                    ("2", [1.1e-3], {"predicted": 0.5})):
                median = cost if key == "1" else 1.1e-3
                conn.execute(text(
                    "INSERT INTO trials (workload_id, target_id, config_key, config, costs, cost,"
                    " gflops, error, error_msg, build_s, run_s, timestamp, extra, created_at) "
                    "VALUES (:w, :t, :k, '{}', :costs, :cost, :gflops, 'none', '', 0, 0, 0, "
                    ":extra, CURRENT_TIMESTAMP)"),
                    {"w": wid, "t": tid, "k": key, "costs": json.dumps(costs), "cost": median,
                     "gflops": flops / median / 1e9, "extra": json.dumps(extra)})
        db.upgrade()
        one, two = db.trials_for("w", "llvm")
        assert one.costs == tuple(first) and one.cost == pytest.approx(1.18e-3)
        assert one.gflops == pytest.approx(flops / 1.18e-3 / 1e9)
        assert one.retimed_cost is None and one.extra["retimed_costs"] == again
        assert two.costs == (1.1e-3,) and two.cost == 1.1e-3  # never re-timed: unchanged
    finally:
        db.dispose()


def test_open_is_idempotent(db_url: str) -> None:
    for _ in range(2):
        db = Database.open(db_url)
        assert db.revision() == head_revision()
        db.dispose()


def test_sqlite_settings(tmp_path: Path) -> None:
    path = tmp_path / "tuning.db"  # a missing directory is refused: test_db_paths
    db = Database.open(f"sqlite:///{path}")
    try:
        assert path.exists()
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
    finally:
        db.dispose()


def test_in_memory_sqlite_works_across_sessions() -> None:
    db = Database.open("sqlite://")
    try:
        key = db.create_api_key("mem")
        assert db.verify_api_key(key)
    finally:
        db.dispose()


def test_constructing_does_not_touch_the_database(tmp_path: Path) -> None:
    path = tmp_path / "lazy.db"
    db = Database(f"sqlite:///{path}")
    assert not path.exists()
    db.dispose()


_OPEN_AT = """
import sys, time
from autotune.db import Database
start = float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))  # both processes migrate at the same moment
db = Database.open(sys.argv[1])
print(db.revision())
db.dispose()
"""


def _open_concurrently(url: str, n: int = 2) -> list[subprocess.CompletedProcess[str]]:
    start = time.time() + 3.0  # past both interpreters' import time
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN_AT, url, repr(start)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(n)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        results.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return results


@pytest.mark.slow
def test_concurrent_open_on_one_sqlite_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    for result in _open_concurrently(url):
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == head_revision()


@pytest.mark.slow
@pytest.mark.postgres
def test_concurrent_open_on_one_postgres_database(pg_url: str) -> None:
    db = Database(pg_url)
    _drop_schema(db)
    db.dispose()
    for result in _open_concurrently(pg_url):
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == head_revision()
