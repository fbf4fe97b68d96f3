"""The dashboard's read queries that compute: the cost model's rank correlation per batch."""
from __future__ import annotations

import pytest

from autotune.service.queries import batch_rank_correlations, spearman


def test_spearman_ranks_ties_by_their_mean_and_is_none_when_undefined() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 45]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 3, 5], [1, 2, 3, 3, 0]) == pytest.approx(-2 / 19)  # scipy's value
    assert spearman([1, 2], [1, 2]) is None
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def test_each_batch_is_ranked_on_its_own_scale() -> None:
    # Batch 0's model scores in the thousands, batch 3's below zero: pooled, the scores look
    # anti-correlated with GFLOP/s, but each model ranked its own batch perfectly.
    trials = [({"predicted": 1000.0 + g, "batch": 0}, g) for g in (1.0, 2.0, 3.0)]
    trials += [({"predicted": -10.0 + g / 100, "batch": 3}, g) for g in (50.0, 60.0, 70.0, 80.0)]
    trials += [({"predicted": 5.0, "batch": 7}, None),  # failed: no measurement to rank
               ({"predicted": 2.0, "batch": 7}, 3.0), ({"predicted": 1.0, "batch": 7}, 4.0),
               ({"predicted": 0.0, "batch": 7}, 5.0), ({"batch": 7}, 9.0),  # random fill: no score
               ({"predicted": 1.0}, 1.0), ({}, 2.0)]  # older records: no batch
    scores, gflops = zip(*[(e["predicted"], g) for e, g in trials[:7]])
    assert spearman(scores, gflops) < 0
    assert batch_rank_correlations(trials) == [(0, 3, pytest.approx(1.0)),
                                               (3, 4, pytest.approx(1.0)),
                                               (7, 3, pytest.approx(-1.0))]


def test_batches_with_too_few_pairs_are_left_out() -> None:
    trials = [({"predicted": 1.0, "batch": 0}, 1.0), ({"predicted": 2.0, "batch": 0}, 2.0)]
    assert batch_rank_correlations(trials) == []
