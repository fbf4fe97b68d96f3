"""Imports trust no line: every field is checked, cost and GFLOP/s are recomputed from the
costs, and the first bad line stops the import (its number and field named, nothing kept)."""
from __future__ import annotations

import io
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

import autotune
from autotune.db import Database
from autotune.db.export_import import BadRecord
from autotune.measure.result import ErrorKind, MeasureResult
from autotune.records import ERROR_KINDS
from autotune.target import Target
from tests.service.service_helpers import Server  # a real `autotune serve`

WL = autotune.workload("matmul", M=64, N=64, K=64)
TARGET = "llvm -mcpu=testcpu -cores=2"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A real `autotune serve` over a fresh SQLite database (not started yet)."""
    found = Server(f"sqlite:///{tmp_path / 'served.db'}", tmp_path)
    yield found
    found.stop()


def _import(server: Server, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", "import", "--db",
                           server.db_url, str(path)], capture_output=True, text=True, timeout=120)


def _line(index: int, **fields: Any) -> str:
    obj = {"workload": json.loads(WL.key), "target": TARGET, "config": {"index": index},
           "costs": [2e-3, 2e-3, 2e-3], "cost": 2e-3, "gflops": 0.26, "error": "none", **fields}
    return json.dumps(obj)


def test_error_kinds_match_the_measurement_kinds() -> None:
    assert ERROR_KINDS == tuple(kind.value for kind in ErrorKind)


def test_a_lying_cost_does_not_become_the_best(db: Database, make) -> None:
    db.add_trials(WL, make.target(TARGET), None,
                  [(make.config(1), MeasureResult(costs=(1e-3,)))], WL.flops())
    with pytest.raises(BadRecord, match=r"line 1, field 'cost'") as bad:
        db.import_jsonl(io.StringIO(_line(2, cost=-1)))
    assert (bad.value.line, bad.value.field) == (1, "cost")
    # A plausible cost or gflops that disagrees with the costs is replaced by theirs.
    assert db.import_jsonl(io.StringIO(_line(3, cost=1e-9, gflops=1e9))) == 1
    best = db.best(WL, TARGET)
    assert best is not None and best.config_index == 1 and best.cost == 1e-3
    (imported,) = [r for r in db.trials_for(WL, TARGET) if r.config_index == 3]
    assert imported.cost == 2e-3
    assert math.isclose(imported.gflops, WL.flops() / 2e-3 / 1e9)


@pytest.mark.parametrize("fields, field", [
    ({"costs": [-1.0]}, "costs"),
    ({"costs": []}, "costs"),
    ({"costs": ["x"]}, "costs"),
    ({"costs": "fast"}, "costs"),
    ({"cost": "x"}, "cost"),
    ({"gflops": float("inf")}, "gflops"),
    ({"error": "exploded"}, "error"),
    ({"build_s": "x"}, "build_s"),
    ({"timestamp": None}, "timestamp"),
    ({"config": {"index": "seven"}}, "config"),
    ({"extra": [1, 2]}, "extra"),
    ({"worker": 7}, "worker"),
    ({"target": ""}, "target"),
])
def test_a_bad_line_stops_the_import_naming_line_and_field(db: Database, fields: dict,
                                                          field: str) -> None:
    text = _line(1) + "\n" + _line(2, **fields) + "\n"
    with pytest.raises(BadRecord) as bad:
        db.import_jsonl(io.StringIO(text))
    assert (bad.value.line, bad.value.field) == (2, field)
    assert db.trials_for(WL, TARGET) == []  # the good first line is not kept either


def test_failed_records_import_without_costs(db: Database) -> None:
    line = _line(4, costs=[], cost=None, gflops=None, error="compile", error_msg="boom")
    assert db.import_jsonl(io.StringIO(line)) == 1
    (record,) = db.trials_for(WL, TARGET)
    assert (record.error, record.cost, record.gflops) == ("compile", None, None)


def test_cli_import_of_a_bad_cost_and_best_over_http(server: Server, tmp_path: Path) -> None:
    """`"cost": "x"` used to be stored as is, and `/api/v1/best` then answered 500."""
    target = Target("llvm").key
    path = tmp_path / "records.jsonl"
    path.write_text(_line(1, target=target, cost="x") + "\n")
    cli = _import(server, path)
    assert cli.returncode == 1
    assert "line 1, field 'cost'" in cli.stderr and "nothing imported" in cli.stderr
    server.start()
    query = {"workload": WL.key, "target": "llvm"}
    assert httpx.get(f"{server.url}/api/v1/best", params=query, timeout=30).status_code == 404
    # A line whose cost lies imports with the cost of its costs.
    path.write_text(_line(1, target=target, cost=1e-9) + "\n")
    cli = _import(server, path)
    assert cli.returncode == 0, cli.stderr
    best = httpx.get(f"{server.url}/api/v1/best", params=query, timeout=30)
    assert best.status_code == 200 and best.json()["cost"] == 2e-3
