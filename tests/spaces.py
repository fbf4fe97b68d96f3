"""Configs that are valid on the target a test runs on, drawn from the space by validity.

A fixed index is a different config, or an invalid one, on another CPU: index 0 of a small
matmul is a 64-register accumulator on AVX2 (16 registers) that AVX-512's 32 allow.
"""
from __future__ import annotations

from typing import Collection

import numpy as np

from autotune.space import Config, ConfigSpace


def valid_configs(space: ConfigSpace, n: int, *, seed: int = 0,
                  skip: Collection[int] = ()) -> list[Config]:
    """``n`` distinct valid configs: the default first (unless skipped), then seeded random
    draws, none of whose indices is in ``skip``."""
    found = [space.default()] if space.default().index not in skip else []
    taken = {*skip, *(c.index for c in found)}
    rng = np.random.default_rng(seed)
    for _ in range(200):
        if len(found) >= n:
            break
        for cfg in space.sample(rng, 64, exclude=taken):
            taken.add(cfg.index)
            if space.is_valid(cfg) and len(found) < n:
                found.append(cfg)
    if len(found) < n:
        raise AssertionError(f"{space.name}: fewer than {n} valid configs drawn")
    return found
