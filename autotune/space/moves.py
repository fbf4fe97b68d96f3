"""Random and local moves over a ConfigSpace: sample, neighbours, mutate, crossover.

All work on digits (candidate positions) so that spaces beyond 2**63 configs
need no int64 index; index arithmetic stays in Python ints there.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, AbstractSet

import numpy as np

from autotune.space.config import Config

if TYPE_CHECKING:
    from autotune.space.configspace import ConfigSpace

# Rejection sampling is used while the space is at least this many times larger
# than what must be avoided plus drawn; below that, enumerate what is left.
_SPARSE_FACTOR = 4


def sample(
    space: ConfigSpace, rng: np.random.Generator, n: int, exclude: AbstractSet[int] | None
) -> list[Config]:
    """Distinct uniform configs outside `exclude`; all remaining ones if too few."""
    if n < 0:
        raise ValueError(f"sample: n must be >= 0, got {n}")
    if n == 0:
        return []
    excl: AbstractSet[int] = exclude if exclude is not None else frozenset()
    if space.size >= _SPARSE_FACTOR * (n + len(excl)):
        return _sample_sparse(space, rng, n, excl)
    return _sample_dense(space, rng, n, excl)


def _sample_sparse(
    space: ConfigSpace, rng: np.random.Generator, n: int, excl: AbstractSet[int]
) -> list[Config]:
    # Digit by digit, so that spaces beyond int64 are sampled uniformly too.
    chosen: dict[int, tuple[int, ...]] = {}
    while len(chosen) < n:
        m = 2 * (n - len(chosen)) + 8
        rows = rng.integers(0, space._dims_np, size=(m, len(space.dims)))
        if space._small:
            idx = (rows @ space._strides_np).tolist()
        else:
            idx = [space.index_of_digits(r) for r in rows.tolist()]
        for i, digits in zip(idx, rows.tolist()):
            if i not in excl and i not in chosen:
                chosen[i] = tuple(digits)
                if len(chosen) == n:
                    break
    return [space.at(i, d) for i, d in chosen.items()]


def _sample_dense(
    space: ConfigSpace, rng: np.random.Generator, n: int, excl: AbstractSet[int]
) -> list[Config]:
    # Only reached when size < 4 * (n + len(exclude)), so this array is small.
    avail: np.ndarray = np.arange(space.size, dtype=np.int64)
    if excl:
        drop = np.fromiter((i for i in excl if 0 <= i < space.size), dtype=np.int64)
        avail = avail[~np.isin(avail, drop)]
    pick = rng.permutation(avail) if len(avail) <= n else rng.choice(avail, n, replace=False)
    return [space.get(int(i)) for i in pick]


def neighbors(
    space: ConfigSpace, config: Config, rng: np.random.Generator | None, k: int | None
) -> list[Config]:
    """Configs differing from `config` in exactly one knob by one step."""
    index, digits = space.locate(config)
    steps = [
        (j, p)
        for j, (knob, d) in enumerate(zip(space.knobs, digits))
        for p in knob.neighbor_positions(d)
    ]
    if k is not None:
        if rng is None:
            raise ValueError("neighbors: k needs an rng")
        if k < 0:
            raise ValueError(f"neighbors: k must be >= 0, got {k}")
        if k < len(steps):
            steps = [steps[s] for s in rng.choice(len(steps), size=k, replace=False)]
    cands, strides = space._cands, space._strides
    values = tuple([c[d] for c, d in zip(cands, digits)])
    out = []
    for j, p in steps:
        out.append(
            Config._make(
                index + (p - digits[j]) * strides[j],
                space.names,
                values[:j] + (cands[j][p],) + values[j + 1 :],
                space._pos,
                digits[:j] + (p,) + digits[j + 1 :],
            )
        )
    return out


def mutate(space: ConfigSpace, config: Config, rng: np.random.Generator, n_knobs: int) -> Config:
    """Set `n_knobs` random knobs (of those with 2+ candidates) to new random values."""
    _, digits = space.locate(config)
    mutable = [j for j, d in enumerate(space.dims) if d > 1]
    m = min(n_knobs, len(mutable))
    if m <= 0:
        return space.config(config)
    new = list(digits)
    for t in rng.choice(len(mutable), size=m, replace=False):
        j = mutable[t]
        r = int(rng.integers(space.dims[j] - 1))
        new[j] = r + (r >= digits[j])  # skip the current value: always a real change
    return space.at(space.index_of_digits(new), tuple(new))


def crossover(space: ConfigSpace, a: Config, b: Config, rng: np.random.Generator) -> Config:
    """Uniform crossover: each knob from `a` or `b` with probability 1/2."""
    _, da = space.locate(a)
    _, db = space.locate(b)
    take_a = rng.random(len(da)) < 0.5
    digits = tuple(x if t else y for x, y, t in zip(da, db, take_a.tolist()))
    return space.at(space.index_of_digits(digits), digits)
