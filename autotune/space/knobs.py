"""Categorical knobs (Reorder, Annotate, Choice) and the `Knob` union type."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence, Union

from autotune.space.base import KnobBase
from autotune.space.split import Split

JsonScalar = Union[None, bool, int, float, str]


@dataclass(frozen=True)
class Reorder(KnobBase):
    """A loop order: one of the given permutations of the same axis names."""

    kind: ClassVar[str] = "reorder"

    name: str
    orders: Sequence[tuple[str, ...]]
    _steps: dict[int, tuple[int, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        orders = tuple(tuple(o) for o in self.orders)
        object.__setattr__(self, "orders", orders)
        if orders:
            axes = sorted(orders[0])
            if len(set(axes)) != len(axes):
                raise ValueError(f"reorder {self.name!r}: repeated axis in {orders[0]!r}")
            for o in orders:
                if sorted(o) != axes or not all(isinstance(a, str) for a in o):
                    raise ValueError(
                        f"reorder {self.name!r}: {o!r} is not a permutation of {tuple(axes)!r}"
                    )
        object.__setattr__(self, "_steps", {})
        self._set_candidates(orders)

    @property
    def candidates(self) -> tuple[tuple[str, ...], ...]:
        return self.orders  # type: ignore[return-value]  # normalised to a tuple

    def from_json_value(self, value: Any) -> tuple[str, ...]:
        return tuple(value)

    def neighbor_positions(self, pos: int) -> tuple[int, ...]:
        """Adjacent candidates, plus swaps of two adjacent axes that are candidates."""
        steps = self._steps.get(pos)
        if steps is None:
            order = self.orders[pos]
            found = [pos - 1, pos + 1]
            for a in range(len(order) - 1):
                swapped = order[:a] + (order[a + 1], order[a]) + order[a + 2 :]
                found.append(self._index.get(swapped, -1))
            n = len(self.orders)
            steps = tuple(dict.fromkeys(p for p in found if 0 <= p < n and p != pos))
            self._steps[pos] = steps
        return steps


@dataclass(frozen=True)
class Annotate(KnobBase):
    """A loop annotation such as "none", "unroll", "vectorize", "parallel"."""

    kind: ClassVar[str] = "annotate"

    name: str
    choices: Sequence[str]

    def __post_init__(self) -> None:
        choices = tuple(self.choices)
        for c in choices:
            if not isinstance(c, str):
                raise ValueError(f"annotate {self.name!r}: choice {c!r} is not a string")
        object.__setattr__(self, "choices", choices)
        self._set_candidates(choices)

    @property
    def candidates(self) -> tuple[str, ...]:
        return self.choices  # type: ignore[return-value]


@dataclass(frozen=True)
class Choice(KnobBase):
    """A plain categorical knob over JSON scalars (unroll depth, on/off, width...)."""

    kind: ClassVar[str] = "choice"

    name: str
    options: Sequence[JsonScalar]

    def __post_init__(self) -> None:
        options = tuple(_scalar(self.name, o) for o in self.options)
        object.__setattr__(self, "options", options)
        self._set_candidates(options)

    @property
    def candidates(self) -> tuple[JsonScalar, ...]:
        return self.options  # type: ignore[return-value]


def _scalar(name: str, value: Any) -> JsonScalar:
    # numpy scalars are common in templates; store the plain Python value.
    if hasattr(value, "item") and not isinstance(value, (bool, int, float, str)):
        value = value.item()
    if value is not None and not isinstance(value, (bool, int, float, str)):
        raise ValueError(f"choice {name!r}: option {value!r} is not a JSON scalar")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"choice {name!r}: option {value!r} is not finite")
    return value


Knob = Union[Split, Reorder, Annotate, Choice]
