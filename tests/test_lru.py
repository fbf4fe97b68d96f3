"""`autotune.lru.LRU`: the one bounded map behind the feature, response and workload caches."""
from __future__ import annotations

import pytest

from autotune.lru import LRU


def test_the_least_recently_used_entry_goes_first() -> None:
    lru: LRU[str, int] = LRU(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1  # now "b" is the oldest
    lru.put("c", 3)
    assert "b" not in lru and len(lru) == 2 and lru.get("a") == 1 and lru.get("c") == 3
    lru.put("a", 10)  # replacing counts as a use
    lru.put("d", 4)
    assert "c" not in lru and lru.get("a") == 10
    assert lru.pop("a") == 10 and lru.pop("a") is None and len(lru) == 1


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="maxsize"):
        LRU(0)


def test_the_caches_share_it() -> None:
    from autotune.costmodel.cache import FeatureCache
    from autotune.measure.correctness import WorkloadData
    from autotune.service.cache import ResponseCache

    assert isinstance(FeatureCache(4)._rows, LRU)
    assert isinstance(WorkloadData(2)._entries, LRU)
    assert isinstance(ResponseCache(lambda: 0)._items, LRU)
