"""Helpers shared by the search tests (a module of its own: several test folders have a
conftest, so ``from conftest import`` depends on collection order)."""
from __future__ import annotations

from autotune.space import Choice, ConfigSpace


def make_space(knobs: int = 5, size: int = 8) -> ConfigSpace:
    """A product of `knobs` integer knobs with `size` candidates each."""
    return ConfigSpace([Choice(f"k{i}", list(range(size))) for i in range(knobs)], name="fake")
