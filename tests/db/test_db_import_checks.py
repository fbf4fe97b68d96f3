"""Imports trust no line: every field is checked, cost and GFLOP/s are recomputed from the
costs, and the first bad line stops the import (its number and field named, nothing kept)."""
from __future__ import annotations

import gzip
import io
import json
import math
import re
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
from autotune.target.peak import peak_flops
from tests.service.service_helpers import Server  # a real `autotune serve`

WL = autotune.workload("matmul", M=64, N=64, K=64)
TARGET = "llvm -mcpu=testcpu -cores=2 -vector-bits=128"  # a target key of another host


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A real `autotune serve` over a fresh SQLite database (not started yet)."""
    found = Server(f"sqlite:///{tmp_path / 'served.db'}", tmp_path)
    yield found
    found.stop()


def _import(server: Server, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autotune.cli", "import", "--db",
                           server.db_url, str(path)], capture_output=True, text=True, timeout=120)


def _config(index: int, target: str = TARGET) -> dict[str, Any]:
    """Config ``index`` of WL's space on ``target``, as a record holds it."""
    return autotune.config_space(WL, Target(target)).get(index).to_dict()


def _line(index: int, on: str = TARGET, **fields: Any) -> str:
    """A valid record of config ``index`` measured on target ``on``, but for ``fields``."""
    obj = {"workload": json.loads(WL.key), "target": on, "config": _config(index, on),
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
    path.write_text(_line(1, on=target, cost="x") + "\n")
    cli = _import(server, path)
    assert cli.returncode == 1
    assert "line 1, field 'cost'" in cli.stderr and "nothing imported" in cli.stderr
    server.start()
    query = {"workload": WL.key, "target": "llvm"}
    assert httpx.get(f"{server.url}/api/v1/best", params=query, timeout=30).status_code == 404
    # A line whose cost lies imports with the cost of its costs.
    path.write_text(_line(1, on=target, cost=1e-9) + "\n")
    cli = _import(server, path)
    assert cli.returncode == 0, cli.stderr
    best = httpx.get(f"{server.url}/api/v1/best", params=query, timeout=30)
    assert best.status_code == 200 and best.json()["cost"] == 2e-3


def _poison(kind: str) -> dict[str, Any]:
    """The fields of a line that would hide every real record, were it imported."""
    config = _config(5)
    if kind == "knobs outside the space":
        return {"config": {**config, "knobs": {**config["knobs"], "tile_i": [999, 999, 999]}}}
    if kind == "index out of range":
        return {"config": {**config, "index": 10**30}}
    if kind == "index without knobs":
        return {"config": {"index": 5}}
    return {"costs": [{"1e-300 s": 1e-300, "1e-9 s": 1e-9}[kind]]}


@pytest.mark.parametrize("kind, field", [
    ("knobs outside the space", "config"), ("index out of range", "config"),
    ("index without knobs", "config"), ("1e-300 s", "costs"), ("1e-9 s", "costs")])
def test_a_line_that_could_hide_the_best_is_refused(db: Database, kind: str,
                                                    field: str) -> None:
    """A config not of the template's space, or a cost below what the target could compute
    at its peak (2 cores of 4 lanes: 224 GFLOP/s at most, so 2.3 us for WL), stops the
    import at its line and field; nothing of the file is kept."""
    text = _line(1) + "\n" + _line(2) + "\n" + _line(5, **_poison(kind)) + "\n"
    with pytest.raises(BadRecord) as bad:
        db.import_jsonl(io.StringIO(text))
    assert (bad.value.line, bad.value.field) == (3, field), str(bad.value)
    assert db.trials_for(WL, TARGET) == []
    fastest = WL.flops() / peak_flops(Target(TARGET))
    assert db.import_jsonl(io.StringIO(_line(1, costs=[fastest * 1.01]))) == 1  # at the edge


def _gzip_cut(path: Path, lines: list[str]) -> None:
    whole = gzip.compress("".join(line + "\n" for line in lines).encode())
    path.write_bytes(whole[: len(whole) - 12])  # the stream's end and trailer are gone


@pytest.mark.parametrize("damage", ["truncated gzip", "not UTF-8"])
def test_a_damaged_file_is_one_line_naming_its_line(tmp_path: Path, damage: str,
                                                    capsys) -> None:
    from autotune.cli import main

    url = f"sqlite:///{tmp_path / 'damaged.db'}"
    Database.open(url).dispose()
    lines = [_line(i) for i in range(1, 40)]
    if damage == "truncated gzip":
        path = tmp_path / "records.jsonl.gz"
        _gzip_cut(path, lines)
    else:
        path = tmp_path / "records.jsonl"
        text = "\n".join(lines[:2] + [lines[2].replace("none", "n\udcffne")]) + "\n"
        path.write_bytes(text.encode("utf-8", "surrogateescape"))
    assert main(["import", "--db", url, str(path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing imported" in err[0], err
    expected = (r"line 3: not UTF-8 text \(byte 0xff at column \d+\)" if damage == "not UTF-8"
                else r"line 3\d: the compressed file ends early \(truncated\)")
    assert re.search(expected, err[0]), err[0]
    db = Database(url)
    assert db.trials_for(WL, TARGET) == []
    db.dispose()


def test_best_skips_and_reports_records_not_of_the_space(tmp_path: Path, make,
                                                         capsys) -> None:
    """A record whose config is not of the template's space (written before the space
    changed, or behind the import's back) is skipped by `best`, which answers from the
    valid records and says what it skipped."""
    from autotune.cli import main

    url = f"sqlite:///{tmp_path / 'mixed.db'}"
    db = Database.open(url)
    db.import_jsonl(io.StringIO("".join(_line(i, costs=[1e-3 * i]) + "\n"
                                        for i in range(2, 6))))
    db.add_trials(WL, make.target(TARGET), None,  # the fastest: a config of no space
                  [(make.config(1), MeasureResult(costs=(1e-5,)))], WL.flops())
    db.dispose()
    with pytest.warns(UserWarning, match=r"skipped 1 record.*config 1.*the best of the "
                                         r"others is config 2"):
        found = autotune.best(WL, TARGET, db=url)
    assert found is not None and found.config.index == 2 and found.cost == 2e-3
    assert main(["best", "matmul", "-p", "M=64", "-p", "N=64", "-p", "K=64", "--target",
                 TARGET, "--db", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["index"] == 2
