"""A plain file path where a database URL is expected names a SQLite file."""
from __future__ import annotations

from pathlib import Path

import pytest

import autotune
from autotune.api import open_database
from autotune.db import Database
from autotune.db.url import DatabaseUrlError, normalize_url


@pytest.mark.parametrize("given", ["runs/tune.db", "tune.db", "C:\\tmp\\tune.db"])
def test_a_path_becomes_an_absolute_sqlite_url(given, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = normalize_url(given)
    assert url.startswith("sqlite:///")
    assert Path(url[len("sqlite:///"):]).is_absolute()


@pytest.mark.parametrize("url", ["sqlite:///x.db", "sqlite://", "postgresql+psycopg://u@h/d"])
def test_urls_stay_as_they_are(url):
    assert normalize_url(url) == url


def test_a_path_opens_records_and_reads_back(tmp_path):
    path = tmp_path / "tune.db"
    with open_database(str(path), create=False) as missing:
        assert missing is None  # looking up never creates the file
    assert not path.exists()
    db = Database.open(str(path))
    try:
        wl = autotune.workload("matmul", M=8, N=8, K=8)
        assert db.trials_for(wl, autotune.Target("llvm")) == []
    finally:
        db.dispose()
    assert path.exists()
    with open_database(str(path), create=False) as found:
        assert found is not None


def test_a_missing_directory_is_refused_before_anything_is_made(tmp_path):
    """Reading and writing alike: a lookup used to answer "no valid record", a tune made
    the directory (relative to wherever it ran)."""
    path = tmp_path / "sub" / "tune.db"
    for url in (str(path), f"sqlite:///{path}"):
        with pytest.raises(DatabaseUrlError, match=f"directory {tmp_path / 'sub'} does not exist"):
            Database.open(url)
        with pytest.raises(DatabaseUrlError, match="mkdir -p"):
            autotune.best(autotune.workload("matmul", M=8, N=8, K=8), db=url)
    assert not (tmp_path / "sub").exists()


def test_a_sqlite_url_sets_how_long_a_writer_waits_for_a_lock(tmp_path):
    import sqlite3
    import time

    from sqlalchemy import text
    from sqlalchemy.exc import OperationalError

    from autotune.db.engine import make_engine

    path = tmp_path / "lock.db"
    engine = make_engine(f"sqlite:///{path}?timeout=0.5")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        start = time.monotonic()
        with pytest.raises(OperationalError, match="locked"):
            with engine.begin() as conn:
                conn.execute(text("INSERT INTO t VALUES (1)"))
        waited = time.monotonic() - start
    finally:
        holder.rollback()
        holder.close()
        engine.dispose()
    assert 0.4 < waited < 10  # the URL's 0.5 s, not the 30 s default


@pytest.mark.parametrize("timeout", ["0", "-1", "soon", "nan", "1e9"])
def test_a_sqlite_timeout_that_is_no_duration_is_refused(timeout, tmp_path):
    with pytest.raises(DatabaseUrlError, match=f"timeout='{timeout}'"):
        Database.open(f"sqlite:///{tmp_path / 'x.db'}?timeout={timeout}")
