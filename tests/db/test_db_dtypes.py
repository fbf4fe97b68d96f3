"""A workload's dtype is part of its database key: float16 and float32 records of one shape
are kept, ranked and exported apart (the key is the workload's JSON: no migration)."""
from __future__ import annotations

import io
import json
from pathlib import Path

from autotune import config_space
from autotune.db import Database
from autotune.ops import Workload, workload
from autotune.records import canonical_workload_key
from autotune.target import Target


def test_half_and_float32_records_of_one_shape_are_different_keys(db: Database, make,
                                                                  tmp_path: Path) -> None:
    gpu = make.target("cuda -arch=sm_90")
    by_dtype = {d: workload("matmul", M=64, N=64, K=64, dtype=d)
                for d in ("float32", "float16", "bfloat16")}
    flops = by_dtype["float32"].flops()
    for i, (name, wl) in enumerate(by_dtype.items()):
        space = config_space(wl, Target(gpu.key))  # an import takes configs of the space
        db.add_trials(wl, gpu, None, [(space.get(1), make.ok(1e-5 * (i + 1))),
                                      (space.get(2), make.ok(2e-5 * (i + 1)))], flops)
    for i, (name, wl) in enumerate(by_dtype.items()):
        best = db.best(wl, gpu)
        assert best is not None and best.cost == 1e-5 * (i + 1)
        assert best.workload_key == wl.key and json.loads(best.workload_key)["dtype"] == name
        assert len(db.trials_for(wl, gpu)) == 2

    buf = io.StringIO()
    db.export_jsonl(buf)
    exported = [json.loads(line) for line in buf.getvalue().splitlines()]
    assert sorted({obj["workload"]["dtype"] for obj in exported}) == [
        "bfloat16", "float16", "float32"]
    fresh = Database.open(f"sqlite:///{tmp_path / 'copy.db'}")
    try:
        assert fresh.import_jsonl(io.StringIO(buf.getvalue())) == 6
        for i, wl in enumerate(by_dtype.values()):
            again = fresh.best(wl, gpu)
            assert again is not None and again.cost == 1e-5 * (i + 1)
            assert Workload.from_json(again.workload_key) == wl
    finally:
        fresh.dispose()


def test_an_exported_half_workload_maps_to_the_tuners_key() -> None:
    wl = workload("conv2d", N=1, C=8, H=8, W=8, K=8, R=3, S=3, stride=1, pad=1,
                  epilogue=["bias"], dtype="float16")
    wire = {"op": "conv2d", "dtype": "float16", "epilogue": ["bias"],
            "params": {"N": 1, "C": 8, "H": 8, "W": 8, "K": 8, "R": 3, "S": 3,
                       "stride": 1, "pad": [1, 1]}}
    assert canonical_workload_key(wire) == wl.key
    assert canonical_workload_key({**wire, "dtype": "float32"}) != wl.key
