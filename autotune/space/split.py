"""The Split knob: multi-level tiling of one loop, outermost factor derived."""
from __future__ import annotations

from dataclasses import dataclass, field
from math import isqrt, prod
from typing import Any, ClassVar

from autotune.space.base import KnobBase

POLICIES = ("factors", "power2", "both")

# Divisors come from trial division up to sqrt(extent): ~0.1 s at 2**40, minutes at 2**61.
# Real loops are far shorter (the service accepts extents up to 2**20, service/validation.py).
MAX_EXTENT = 2**40


def divisors(n: int) -> list[int]:
    """Sorted divisors of a positive integer."""
    small = [d for d in range(1, isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def factor_set(extent: int, policy: str) -> list[int]:
    """Tile sizes a policy allows for a loop of `extent` (sorted)."""
    powers = [1 << k for k in range(extent.bit_length()) if 1 << k <= extent]
    if policy == "factors":
        return divisors(extent)
    if policy == "power2":
        return powers
    return sorted(set(divisors(extent)) | set(powers))


def inner_tuples(
    extent: int, n_inner: int, factors: list[int], innermost: list[int], exact: bool
) -> list[tuple[int, ...]]:
    """All inner-factor tuples (outer to inner) whose product is <= extent.

    With `exact`, each partial product must divide `extent` (so the outer factor
    makes the product exactly `extent`). `innermost` is the allowed last factor.
    """
    out: list[tuple[int, ...]] = []

    def rec(prefix: tuple[int, ...], left: int, rem: int) -> None:
        # `rem` = extent // product so far; a factor f fits iff f <= rem.
        choices = innermost if left == 1 else factors
        for f in choices:
            if f > rem:
                break
            if exact and rem % f:
                continue
            if left == 1:
                out.append(prefix + (f,))
            else:
                rec(prefix + (f,), left - 1, rem // f)

    if n_inner == 0:
        return [()]
    rec((), n_inner, extent)
    return out


@dataclass(frozen=True)
class Split(KnobBase):
    """Tile a loop of `extent` into `levels` factors (outermost first).

    The outer factor is ceil(extent / prod(inner)); policy "factors" keeps exact
    tilings, "power2" and "both" allow a guarded tail (padded product < 2*extent).
    """

    kind: ClassVar[str] = "split"

    name: str
    extent: int
    levels: int
    policy: str = "both"
    max_inner: int | None = None
    inner_multiple_of: int | None = None
    _candidates: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    _inner_index: dict[tuple[int, ...], int] = field(init=False, repr=False, compare=False)
    _steps: dict[int, tuple[int, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"split {self.name!r}"
        if not isinstance(self.extent, int) or self.extent < 1:
            raise ValueError(f"{where}: extent must be a positive int, got {self.extent!r}")
        if self.extent > MAX_EXTENT:
            raise ValueError(f"{where}: extent {self.extent} is larger than {MAX_EXTENT}")
        if not isinstance(self.levels, int) or self.levels < 1:
            raise ValueError(f"{where}: levels must be a positive int, got {self.levels!r}")
        if self.policy not in POLICIES:
            raise ValueError(f"{where}: policy must be one of {POLICIES}, got {self.policy!r}")
        for opt in ("max_inner", "inner_multiple_of"):
            v = getattr(self, opt)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError(f"{where}: {opt} must be a positive int or None, got {v!r}")
        cands = self._enumerate()
        if not cands:
            raise ValueError(f"{where}: no tiling satisfies the constraints")
        set_ = object.__setattr__
        set_(self, "_candidates", cands)
        set_(self, "_inner_index", {c[1:]: i for i, c in enumerate(cands)})
        # Per-instance memo of neighbour steps; filled lazily on the search path.
        set_(self, "_steps", {})
        self._set_candidates(cands)

    def _enumerate(self) -> tuple[tuple[int, ...], ...]:
        extent = self.extent
        if self.levels == 1:
            return ((extent,),)
        factors = factor_set(extent, self.policy)
        last = [f for f in factors if self._innermost_ok(f)]
        tuples = inner_tuples(extent, self.levels - 1, factors, last, self.policy == "factors")
        # prod(inner) <= extent already bounds the waste: ceil(e/p)*p <= e+p-1 < 2e.
        return tuple(sorted((-(-extent // prod(t)),) + t for t in tuples))

    def _innermost_ok(self, f: int) -> bool:
        if self.max_inner is not None and f > self.max_inner:
            return False
        m = self.inner_multiple_of
        if m is not None:
            return f == self.extent if self.extent < m else f % m == 0
        return True

    @property
    def candidates(self) -> tuple[tuple[int, ...], ...]:
        return self._candidates

    def from_json_value(self, value: Any) -> tuple[int, ...]:
        return tuple(int(v) for v in value)

    def neighbor_positions(self, pos: int) -> tuple[int, ...]:
        """Adjacent candidates, plus moving a factor of 2 between two levels."""
        steps = self._steps.get(pos)
        if steps is None:
            steps = self._compute_steps(pos)
            self._steps[pos] = steps
        return steps

    def _compute_steps(self, pos: int) -> tuple[int, ...]:
        inner = self._candidates[pos][1:]
        moved: list[tuple[int, ...]] = []
        for a, fa in enumerate(inner):
            # The outer factor is derived, so doubling/halving one inner factor
            # is the move of a 2 between that level and the outermost.
            moved.append(inner[:a] + (fa * 2,) + inner[a + 1 :])
            if fa % 2 == 0:
                half = inner[:a] + (fa // 2,) + inner[a + 1 :]
                moved.append(half)
                for b in range(len(inner)):
                    if b != a:
                        moved.append(half[:b] + (half[b] * 2,) + half[b + 1 :])
        found = [pos - 1, pos + 1] + [self._inner_index.get(t, -1) for t in moved]
        n = len(self._candidates)
        return tuple(dict.fromkeys(p for p in found if 0 <= p < n and p != pos))

    def _describe_params(self) -> dict[str, Any]:
        return {
            "extent": self.extent,
            "levels": self.levels,
            "policy": self.policy,
            "max_inner": self.max_inner,
            "inner_multiple_of": self.inner_multiple_of,
        }
