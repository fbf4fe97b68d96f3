"""JSON-lines export and import: exact round trips, de-duplication, gzip files."""
from __future__ import annotations

import dataclasses
import gzip
import io
import json
from pathlib import Path

import pytest

from autotune.db import Database
from autotune.measure.result import ErrorKind

FLOPS = 1_000_003
# Floats whose shortest repr is long or extreme: they must survive the round trip bit for bit.
AWKWARD = (0.1 + 0.2, 1 / 3, 5e-324, 1.7976931348623157e308, 1e-300, 123456.78901234567)


def _fill(db: Database, make) -> None:
    w1, w2 = make.workload(m=16), make.workload("fake_conv2d", n=1, c=3)
    cpu, gpu = make.target(), make.target("cuda -arch=sm_90")
    job = db.create_job(workload=w1, target=cpu, tuner="xgb", trials=8, options={})
    db.add_trials(w1, cpu, job.id, [
        (make.config(1), make.ok(*AWKWARD[:3], predicted=0.75, note="ünïcode")),
        (make.config(2), make.ok(1 / 7, 2 / 7)),
        (make.config(2**70), make.fail(ErrorKind.BUILD_TIMEOUT, "took too long")),
    ], FLOPS)
    db.add_trials(w2, gpu, None, [
        (make.config(5), make.ok(*AWKWARD[3:], regs=[32, 0], spills=0)),
        (make.config(6), make.ok(3e-5)),
    ], FLOPS)


def _export(db: Database, **kw) -> str:
    buf = io.StringIO()
    db.export_jsonl(buf, **kw)
    return buf.getvalue()


def test_export_format(db: Database, make) -> None:
    _fill(db, make)
    lines = _export(db).splitlines()
    assert len(lines) == 5
    first = json.loads(lines[0])
    assert list(first) == ["workload", "target", "config", "costs", "cost", "gflops", "error",
                           "error_msg", "build_s", "run_s", "timestamp", "extra", "worker"]
    assert first["workload"] == {"op": "fake_matmul", "params": {"m": 16}, "dtype": "float32"}
    assert first["target"] == make.target().key
    assert tuple(first["costs"]) == AWKWARD[:3]
    assert first["extra"] == {"predicted": 0.75, "note": "ünïcode"} and first["worker"] is None
    failed = json.loads(lines[2])
    assert failed["config"]["index"] == 2**70
    assert failed["error"] == "build_timeout" and failed["cost"] is None


def test_round_trip_into_an_empty_database(db: Database, make, tmp_path: Path) -> None:
    _fill(db, make)
    exported = _export(db)
    fresh = Database.open(f"sqlite:///{tmp_path / 'copy.db'}")
    try:
        assert fresh.import_jsonl(io.StringIO(exported)) == 5
        assert _export(fresh) == exported
        for w, t in [(make.workload(m=16), make.target()),
                     (make.workload("fake_conv2d", n=1, c=3), make.target("cuda -arch=sm_90"))]:
            mine, theirs = db.best(w, t), fresh.best(w, t)
            assert theirs is not None
            assert (theirs.config, theirs.costs, theirs.cost, theirs.gflops) == (
                mine.config, mine.costs, mine.cost, mine.gflops)
        # Imported rows carry no job; transfer still finds them by op and target kind.
        assert all(r.job_id is None for r in fresh.trials_for(make.workload(m=16), make.target()))
        assert set(fresh.history("fake_conv2d", "cuda", None)) == {
            make.workload("fake_conv2d", n=1, c=3).key}
        # Importing again adds nothing.
        assert fresh.import_jsonl(io.StringIO(exported)) == 0
    finally:
        fresh.dispose()


def test_import_into_the_same_dialect_round_trips(db: Database, make, db_url: str) -> None:
    # Export from SQLite and import into the parametrized database (PostgreSQL included).
    source = Database.open("sqlite://")
    try:
        _fill(source, make)
        exported = _export(source)
    finally:
        source.dispose()
    assert db.import_jsonl(io.StringIO(exported)) == 5
    assert _export(db) == exported


def test_worker_round_trips_and_old_lines_import_without_one(db: Database, make) -> None:
    w, t = make.workload(), make.target()
    who = {"worker": "host-1/cpu", "host": "host-1", "device": "cpu", "version": "0"}
    db.add_trials(w, t, None, [(make.config(1), make.ok(1e-3, measured_by=who))], FLOPS)
    line = json.loads(_export(db))
    assert line["worker"] == "host-1/cpu"
    fresh = Database.open("sqlite://")
    try:
        old = {key: value for key, value in line.items() if key != "worker"}
        old["config"] = {**line["config"], "index": 2}
        assert fresh.import_jsonl(io.StringIO(json.dumps(line) + "\n" + json.dumps(old))) == 2
        assert [r.worker for r in fresh.trials_for(w, t)] == ["host-1/cpu", None]
    finally:
        fresh.dispose()


def test_export_filters(db: Database, make) -> None:
    _fill(db, make)
    assert len(_export(db, workload=make.workload(m=16)).splitlines()) == 3
    assert len(_export(db, target="cuda -arch=sm_90").splitlines()) == 2
    assert _export(db, workload=make.workload(m=16), target="cuda -arch=sm_90") == ""


@pytest.mark.parametrize("name", ["records.jsonl", "records.jsonl.gz"])
def test_path_variants(db: Database, make, tmp_path: Path, name: str) -> None:
    _fill(db, make)
    path = tmp_path / name
    assert db.export_jsonl_path(path) == 5
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b" if name.endswith(".gz") else raw.startswith(b"{")
    text = gzip.decompress(raw).decode() if name.endswith(".gz") else raw.decode()
    assert text == _export(db)
    fresh = Database.open(f"sqlite:///{tmp_path / 'copy.db'}")
    try:
        assert fresh.import_jsonl_path(path) == 5
        assert _export(fresh) == text
    finally:
        fresh.dispose()


def test_gzip_is_detected_by_content_on_import(db: Database, make, tmp_path: Path) -> None:
    _fill(db, make)
    path = tmp_path / "records.dump"  # no .gz suffix
    path.write_bytes(gzip.compress(_export(db).encode()))
    fresh = Database.open("sqlite://")
    try:
        assert fresh.import_jsonl_path(path) == 5
    finally:
        fresh.dispose()


def test_bad_lines_are_reported_with_their_number(db: Database) -> None:
    good = json.dumps({"workload": {"op": "fake_x"}, "target": "llvm", "config": {"index": 1},
                       "costs": [1.0], "cost": 1.0, "gflops": 1.0})
    with pytest.raises(ValueError, match="line 3"):
        db.import_jsonl(io.StringIO(good + "\n\nnot json\n"))
    with pytest.raises(ValueError, match="line 1"):
        db.import_jsonl(io.StringIO(json.dumps({"workload": "x", "target": "llvm"}) + "\n"))
    with pytest.raises(ValueError, match="line 1"):
        db.import_jsonl(io.StringIO(json.dumps({"workload": {}, "target": "llvm", "config": {}})))
    # A failed import leaves nothing behind (one transaction).
    assert db.history("fake_x", "llvm", None) == {}


def test_one_parser_reads_exported_lines_and_rest_bodies(db: Database, make) -> None:
    from autotune.records import canonical_workload_key, record_from_json

    _fill(db, make)
    originals = sorted(db.trials_for(make.workload(m=16), make.target()), key=lambda r: r.id)
    lines = [json.loads(line) for line in _export(db, workload=make.workload(m=16)).splitlines()]
    parsed = [record_from_json(obj) for obj in lines]
    # Everything but the local ids survives: exported floats parse back bit for bit.
    assert [dataclasses.replace(r, id=None, job_id=None) for r in originals] == parsed
    rest = {"id": 7, "job_id": 3, "config": {"index": 2, "knobs": {}}, "costs": [0.5],
            "cost": 0.5, "gflops": 2.0, "error": "none", "error_msg": ""}
    record = record_from_json(rest, workload_key="wk", target_key="llvm")
    assert (record.workload_key, record.target_key, record.config_index, record.id) == \
        ("wk", "llvm", 2, 7)
    with pytest.raises(ValueError, match="config index"):
        record_from_json({"workload": {"op": "x"}, "config": {}})
    # One canonical key for a key, a wire object and a Workload.
    import autotune
    wl = autotune.workload("matmul", M=8, N=8, K=8)
    wire = dict(reversed(json.loads(wl.to_json()).items()))  # another key order
    assert canonical_workload_key(wl) == canonical_workload_key(wl.key) == \
        canonical_workload_key(wire) == wl.key
