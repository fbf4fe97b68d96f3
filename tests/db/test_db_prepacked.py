"""A workload's prepacked form and its usual form keep apart records: the best of one is
never the other's, and an export re-imports each to its own key."""
from __future__ import annotations

import io
from pathlib import Path

import autotune
from autotune.db import Database
from autotune.driver import config_space

LLVM = autotune.Target("llvm")
CONV = dict(N=1, C=8, H=8, W=8, K=16, R=3, S=3, stride=1, pad=1)


def test_the_two_forms_keep_their_records_apart(db: Database, db_url: str, make,
                                                tmp_path: Path) -> None:
    usual = autotune.workload("conv2d", **CONV)
    packed = autotune.workload("conv2d", prepacked=True, **CONV)
    space = config_space(packed, LLVM)
    assert space.size == config_space(usual, LLVM).size  # one space, two record sets
    flops = usual.flops()
    # the prepacked form's best is faster than anything of the usual form, and the other way
    db.add_trials(usual, LLVM, None, [(space.get(1), make.ok(3e-4)),
                                      (space.get(2), make.ok(5e-4))], flops)
    db.add_trials(packed, LLVM, None, [(space.get(3), make.ok(1e-4)),
                                       (space.get(1), make.ok(4e-4))], flops)
    assert db.best(usual, LLVM).config_index == 1
    assert db.best(packed, LLVM).config_index == 3
    assert db.measured_indices(usual, LLVM) == {1, 2}
    assert db.measured_indices(packed, LLVM) == {1, 3}
    assert autotune.best(packed, LLVM, db=db_url).config.index == 3
    assert autotune.best(usual, LLVM, db=db_url).config.index == 1

    buf = io.StringIO()
    assert db.export_jsonl(buf, workload=packed) == 2
    fresh = Database.open(f"sqlite:///{tmp_path / 'copy.db'}")
    try:  # re-imported to the prepacked key, not the usual one
        assert fresh.import_jsonl(io.StringIO(buf.getvalue())) == 2
        assert {r.config_index for r in fresh.trials_for(packed, LLVM)} == {1, 3}
        assert fresh.trials_for(usual, LLVM) == []
    finally:
        fresh.dispose()
