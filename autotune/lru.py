"""`LRU`: a bounded map that forgets its least recently used entry.

Not thread-safe: the caches built on it (feature rows, response bodies, workload data) hold
their own locks, or live in one thread.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Hashable, Optional, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most ``maxsize`` entries; `get` and `put` mark an entry as the most recently used."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError(f"LRU: maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self._items: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: K) -> Optional[V]:
        """The value of ``key`` (now the most recently used), or None."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``, forgetting the least recently used beyond maxsize."""
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.maxsize:
            self._items.popitem(last=False)

    def pop(self, key: K) -> Optional[V]:
        """Remove ``key``; its value, or None when absent."""
        return self._items.pop(key, None)
