"""ConfigSpace: the product of a template's knobs, addressed by mixed-radix index.

Digit order: the FIRST knob is the MOST significant digit, so index order is
`itertools.product` order over the knobs' candidates (the last knob varies fastest):
index = sum(digit[k] * prod(dims[k+1:])).
"""
from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import product
from typing import Any

import numpy as np

from autotune.space import moves
from autotune.space.config import Config
from autotune.space.knobs import Knob

Validity = Callable[[Config], "str | None"]

# Iterating a larger space is almost certainly a bug (use sample / get instead).
MAX_ITER_SIZE = 10**6
# Below this size, index arithmetic fits int64 and can be vectorised with numpy.
_INT64_LIMIT = 2**63


class ConfigSpace:
    """The schedule space of one template instance; points are `Config` values."""

    def __init__(
        self,
        knobs: Sequence[Knob],
        default: Mapping[str, Any] | None = None,
        validity: Validity | None = None,
        name: str = "",
    ) -> None:
        self.name = name
        self._knobs: tuple[Knob, ...] = tuple(knobs)
        self._names: tuple[str, ...] = tuple(k.name for k in self._knobs)
        # Shared by every Config this space makes: identity marks "digits are mine".
        self._pos: dict[str, int] = {n: i for i, n in enumerate(self._names)}
        if len(self._pos) != len(self._names):
            dup = sorted({n for n in self._names if self._names.count(n) > 1})
            raise ValueError(f"space {name!r}: repeated knob names {dup}")
        self._cands: tuple[tuple[Any, ...], ...] = tuple(k.candidates for k in self._knobs)
        self._dims: tuple[int, ...] = tuple(len(c) for c in self._cands)
        strides, size = [], 1
        for d in reversed(self._dims):
            strides.append(size)
            size *= d
        self._strides: tuple[int, ...] = tuple(reversed(strides))
        self._size: int = size
        self._rdims: tuple[int, ...] = tuple(reversed(self._dims))
        self._small = size < _INT64_LIMIT
        self._dims_np = np.asarray(self._dims, dtype=np.int64)
        self._strides_np = np.asarray(self._strides, dtype=np.int64) if self._small else None
        self._validity = validity
        self._default = self.get(0)
        if default is not None:
            try:
                self._default = self.config(default)
            except ValueError as e:
                raise ValueError(f"space {name!r}: bad default config: {e}") from None

    # --- shape -------------------------------------------------------------
    @property
    def knobs(self) -> tuple[Knob, ...]:
        return self._knobs

    @property
    def names(self) -> tuple[str, ...]:
        return self._names

    @property
    def dims(self) -> tuple[int, ...]:
        """Number of candidates of each knob, in knob order."""
        return self._dims

    @property
    def size(self) -> int:
        """Number of configs (a Python int of any size; `len()` overflows past 2**63)."""
        return self._size

    def __len__(self) -> int:
        return self._size

    def knob(self, name: str) -> Knob:
        """The knob called `name` (KeyError if none)."""
        try:
            return self._knobs[self._pos[name]]
        except KeyError:
            raise KeyError(f"space {self.name!r} has no knob {name!r}") from None

    def __repr__(self) -> str:
        return f"ConfigSpace({self.name!r}, knobs={list(self._names)}, size={self._size})"

    # --- index <-> digits <-> config ---------------------------------------
    def digits(self, index: int) -> tuple[int, ...]:
        """Candidate position of each knob for `index` (IndexError if out of range)."""
        return self._digits(self._check_index(index))

    def from_digits(self, digits: Sequence[int]) -> int:
        """Index of a tuple of candidate positions (ValueError naming a bad knob)."""
        if len(digits) != len(self._dims):
            raise ValueError(f"space {self.name!r}: expected {len(self._dims)} digits")
        index = 0
        for name, d, dim in zip(self._names, digits, self._dims):
            d = operator.index(d)
            if not 0 <= d < dim:
                raise ValueError(f"knob {name!r}: position {d} out of range [0, {dim})")
            index = index * dim + d
        return index

    def get(self, index: int) -> Config:
        """The config at `index` (IndexError if out of range)."""
        i = self._check_index(index)
        return self.at(i, self._digits(i))

    def index_of(self, values: Mapping[str, Any]) -> int:
        """Index of the config with these knob values (ValueError naming a bad knob)."""
        return self.locate(values)[0]

    def config(self, values: Mapping[str, Any]) -> Config:
        """The config with these knob values; lists are accepted for tuple values."""
        if isinstance(values, Config) and values._pos is self._pos:
            return values
        return self.at(*self.locate(values))

    def default(self) -> Config:
        """The template's hand-written default config, or `get(0)` when it has none."""
        return self._default

    def __iter__(self) -> Iterator[Config]:
        # Not a generator itself, so that iter() raises at once for a huge space.
        if self._size > MAX_ITER_SIZE:
            raise TypeError(f"space {self.name!r} has {self._size} configs; too many to iterate")
        return self._iter_all()

    def _iter_all(self) -> Iterator[Config]:
        names, pos, cands = self._names, self._pos, self._cands
        all_digits = product(*(range(d) for d in self._dims))
        for i, digits in enumerate(all_digits):
            values = tuple([c[d] for c, d in zip(cands, digits)])
            yield Config._make(i, names, values, pos, digits)

    # --- validity ----------------------------------------------------------
    def invalid_reason(self, config: Config) -> str | None:
        """Why the template's validity predicate rejects `config`, or None if valid."""
        return None if self._validity is None else self._validity(config)

    def is_valid(self, config: Config) -> bool:
        """Whether the validity predicate accepts `config` (always True without one)."""
        return self._validity is None or self._validity(config) is None

    # --- arrays for models and the genetic tuner -----------------------------
    def encode(self, configs: Iterable[Config]) -> np.ndarray:
        """Candidate positions of each config: int64 array of shape (n, n_knobs)."""
        rows = [self.locate(c)[1] for c in configs]
        return np.array(rows, dtype=np.int64).reshape(len(rows), len(self._dims))

    def encode_indices(self, indices: Iterable[int]) -> np.ndarray:
        """Like `encode`, from indices (vectorised when the space fits int64)."""
        n = len(self._dims)
        if not self._small:
            return np.array([self.digits(i) for i in indices], dtype=np.int64).reshape(-1, n)
        if not isinstance(indices, np.ndarray):
            indices = list(indices)
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self._size):
            raise IndexError(f"space {self.name!r}: index out of range [0, {self._size})")
        return (idx[:, None] // self._strides_np) % self._dims_np

    def decode_rows(self, rows: np.ndarray | Sequence[Sequence[int]]) -> list[int]:
        """Indices of rows of candidate positions (the inverse of `encode`)."""
        arr = np.asarray(rows, dtype=np.int64)
        if arr.size == 0:
            return []
        if arr.ndim != 2 or arr.shape[1] != len(self._dims):
            raise ValueError(f"space {self.name!r}: rows must have shape (n, {len(self._dims)})")
        bad = (arr < 0) | (arr >= self._dims_np)
        if bad.any():
            row, col = (int(x[0]) for x in np.nonzero(bad))
            raise ValueError(
                f"knob {self._names[col]!r}: position {arr[row, col]} out of range "
                f"[0, {self._dims[col]}) in row {row}"
            )
        if self._small:
            return (arr @ self._strides_np).tolist()
        return [self.index_of_digits(r) for r in arr.tolist()]

    # --- search moves (see moves.py) ---------------------------------------
    def sample(
        self, rng: np.random.Generator, n: int, exclude: set[int] | None = None
    ) -> list[Config]:
        """`n` distinct uniformly random configs whose indices are not in `exclude`.

        Returns all remaining configs (shuffled) when fewer than `n` are left.
        """
        return moves.sample(self, rng, n, exclude)

    def neighbors(
        self, config: Config, rng: np.random.Generator | None = None, k: int | None = None
    ) -> list[Config]:
        """Configs one step away in exactly one knob; a random `k` of them if `k` given."""
        return moves.neighbors(self, config, rng, k)

    def mutate(self, config: Config, rng: np.random.Generator, n_knobs: int = 1) -> Config:
        """`config` with `n_knobs` random knobs set to a different random value."""
        return moves.mutate(self, config, rng, n_knobs)

    def crossover(self, a: Config, b: Config, rng: np.random.Generator) -> Config:
        """Each knob's value taken from `a` or `b` with equal probability."""
        return moves.crossover(self, a, b, rng)

    # --- UI ----------------------------------------------------------------
    def to_description(self) -> dict[str, Any]:
        """A JSON-able summary: knobs (kinds, sizes, truncated candidates) and size."""
        return {
            "name": self.name,
            "size": self._size,
            "digit_order": "first knob most significant",
            "knobs": [k.describe() for k in self._knobs],
            "default": self._default.to_dict(),
            "has_validity": self._validity is not None,
        }

    # --- internals shared with moves.py --------------------------------------
    def _check_index(self, index: int) -> int:
        i = operator.index(index)
        if not 0 <= i < self._size:
            raise IndexError(f"space {self.name!r}: index {i} out of range [0, {self._size})")
        return i

    def _digits(self, i: int) -> tuple[int, ...]:
        out = []
        for d in self._rdims:
            i, r = divmod(i, d)
            out.append(r)
        out.reverse()
        return tuple(out)

    def index_of_digits(self, digits: Sequence[int]) -> int:
        """The index of the point whose knobs take their ``digits``-th candidates."""
        index = 0
        for d, dim in zip(digits, self._dims):
            index = index * dim + d
        return index

    def at(self, index: int, digits: tuple[int, ...]) -> Config:
        """The config at ``index``, whose digits the caller already knows (no division)."""
        values = tuple([c[d] for c, d in zip(self._cands, digits)])
        return Config._make(index, self._names, values, self._pos, digits)

    def locate(self, values: Mapping[str, Any]) -> tuple[int, tuple[int, ...]]:
        """(index, digits) of a mapping of knob values, validating every value."""
        if isinstance(values, Config) and values._pos is self._pos and values._digits is not None:
            return values.index, values._digits
        digits = []
        index = 0
        for knob, dim in zip(self._knobs, self._dims):
            try:
                v = values[knob.name]
            except KeyError:
                raise ValueError(
                    f"space {self.name!r}: missing value for knob {knob.name!r}") from None
            p = knob.index_of(v)
            digits.append(p)
            index = index * dim + p
        if len(values) != len(self._dims):
            extra = sorted(str(n) for n in values if n not in self._pos)
            raise ValueError(f"space {self.name!r}: unknown knobs {extra}")
        return index, tuple(digits)
