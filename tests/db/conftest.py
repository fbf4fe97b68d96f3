"""Fixtures for the database tests: test doubles, and a ``db`` on SQLite and on PostgreSQL.

The PostgreSQL database (``pg_url``, ``fresh_pg_url``) comes from tests/conftest.py; the
postgres cases skip when its server is unreachable, or fail when CI=true.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest

from autotune.db import Database
from autotune.measure.result import ErrorKind, MeasureResult


@dataclass(frozen=True)
class FakeWorkload:
    """Stands in for autotune.ops.Workload: only ``op`` and ``key`` are used."""

    op: str
    params: tuple[tuple[str, int], ...] = ()

    @property
    def key(self) -> str:
        # Same form as export_import.canonical_workload_key's fallback, so exports re-import
        # to this key.
        return json.dumps({"op": self.op, "params": dict(self.params), "dtype": "float32"},
                          sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class FakeTarget:
    key: str

    @property
    def kind(self) -> str:
        return self.key.split()[0]


@dataclass(frozen=True)
class FakeConfig:
    index: int
    knobs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "knobs": dict(self.knobs) or {"tile_x": self.index % 8}}


class Make:
    """Builders for the doubles (ops named ``fake_*`` so autotune.ops never claims them)."""

    @staticmethod
    def workload(op: str = "fake_matmul", **params: int) -> FakeWorkload:
        return FakeWorkload(op, tuple(sorted((params or {"m": 64, "n": 64, "k": 64}).items())))

    @staticmethod
    def target(key: str = "llvm -mcpu=testcpu -cores=2") -> FakeTarget:
        return FakeTarget(key)

    @staticmethod
    def config(index: int) -> FakeConfig:
        return FakeConfig(index)

    @staticmethod
    def ok(*costs: float, **extra: Any) -> MeasureResult:
        return MeasureResult(costs=tuple(costs), build_s=0.25, run_s=0.5, timestamp=1700000000.5,
                             extra=extra)

    @staticmethod
    def fail(kind: ErrorKind = ErrorKind.COMPILE, msg: str = "boom") -> MeasureResult:
        return MeasureResult.failure(kind, msg, build_s=0.1)


@pytest.fixture
def make() -> Make:
    return Make()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """The URL of an empty, migrated database of each dialect."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'tuning.db'}"
        Database.open(url).dispose()
        return url
    return str(request.getfixturevalue("fresh_pg_url"))


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database(db_url)
    yield database
    database.dispose()


@pytest.fixture
def dialect(db_url: str) -> str:
    return "sqlite" if db_url.startswith("sqlite") else "postgresql"
