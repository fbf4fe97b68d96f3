"""The ensemble of stochastic models behind the xgb tuner, on real measurements."""
import numpy as np
import pytest

from autotune.costmodel.ensemble import Ensemble
from autotune.costmodel.model import XGBModel, spearman
from tests.costmodel.cm_helpers import dataset


def make(seed: int, subsample: float) -> XGBModel:
    return XGBModel("rank", n_estimators=60, subsample=subsample, seed=seed)


def test_members_disagree_where_records_are_few_and_their_mean_still_ranks():
    _, _, _, X, y = next(iter(dataset().values()))
    rng = np.random.default_rng(0)
    train = rng.choice(len(y), 24, replace=False)
    test = np.setdiff1d(np.arange(len(y)), train)
    ens = Ensemble(make, size=4, subsample=0.7, seed=1).fit(X[train], y[train])
    each = ens.predict_each(X[test])
    assert each.shape == (4, len(test)) and ens.fitted
    # different seeds on 70% of the rows per tree: different favourites
    assert len({int(np.argmax(s)) for s in each}) >= 2
    np.testing.assert_allclose(ens.predict(X[test]), each.mean(axis=0))
    assert spearman(ens.predict(X[test]), y[test]) > 0.3  # measured here: ~0.6
    assert ens.predict_each(X[:0]).shape == (4, 0)


def test_one_member_on_all_rows_is_the_plain_model():
    _, _, _, X, y = next(iter(dataset().values()))
    ens = Ensemble(make, size=1, subsample=1.0, seed=3).fit(X[:64], y[:64])
    single = make(int(np.random.default_rng(3).integers(2**31, size=1)[0]), 1.0)
    np.testing.assert_array_equal(ens.predict(X[64:]), single.fit(X[:64], y[:64]).predict(X[64:]))


@pytest.mark.parametrize("kwargs", [{"size": 0}, {"subsample": 0.0}, {"subsample": 1.5}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Ensemble(make, **kwargs)
