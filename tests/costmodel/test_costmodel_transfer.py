"""Transfer: a base model from other workloads' records ranks a new workload's configs."""
import numpy as np
import pytest

from autotune.costmodel.model import quality
from autotune.costmodel.transfer import BaseModel, base_weight, blend
from tests.costmodel.cm_helpers import dataset, trial_records


def keys() -> list[str]:
    return list(dataset())


def test_base_model_from_other_workloads_ranks_the_new_one():
    main, *others = keys()
    history = {k: trial_records(k) for k in keys()}  # the main workload's own records too
    _, target, _, X, y = dataset()[main]
    base = BaseModel.from_history(history, target, exclude=main)
    assert base is not None and main not in base.workloads
    assert set(base.workloads) == set(others) and base.n_records == 320
    q = quality(base, X, y, k=10)  # "ast" rows: the base model reads their curve block
    # measured here: Spearman ~0.87, top-10 recall 0.4 (chance: 10/320)
    assert q["spearman"] >= 0.6 and q["top_k_recall"] >= 0.2, q


def test_history_without_usable_records_gives_no_base_model():
    main, other, _ = keys()
    _, target, _, _, _ = dataset()[main]
    failed = [r.__class__(**{**r.__dict__, "gflops": None, "error": "runtime"})
              for r in trial_records(other)[:5]]
    assert BaseModel.from_history({}, target) is None
    assert BaseModel.from_history({main: trial_records(main)[:5]}, target, exclude=main) is None
    assert BaseModel.from_history({other: failed}, target) is None
    assert BaseModel.from_history({"not json": failed}, target) is None


def test_base_weight_decays_and_blend_works_on_ranks():
    assert base_weight(0) == 1.0 and base_weight(64) == pytest.approx(0.5)
    assert base_weight(640) < 0.1
    base, own = np.array([1.0, 2.0, 3.0]), np.array([300.0, 200.0, 100.0])
    assert blend(base, None, 0).tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert blend(base, own, 0).tolist() == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert np.argmax(blend(base, own, 10_000)) == 0  # the own model has taken over
    assert blend(base, own, 64).tolist() == pytest.approx([2 / 3, 2 / 3, 2 / 3])

