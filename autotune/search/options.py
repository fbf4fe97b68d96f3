"""Tuner option tables (Kernel Tuner style): each option has a name, a description and a default.

A tuner class declares ``OPTIONS``; ``resolve_options`` checks user values against it, so a
misspelt option or a wrong type is a ``ValueError`` naming the tuner and the option. Every
number an option takes from a client has an upper bound (``maximum``), shown by ``describe``.
"""
from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence


@dataclass(frozen=True)
class Option:
    """One tuner option. ``choices`` restricts the value; ``minimum``/``maximum`` bound numbers."""

    name: str
    description: str
    default: Any
    choices: Optional[tuple[Any, ...]] = None
    minimum: Optional[float] = None
    maximum: Optional[float] = None

    def check(self, tuner: str, value: Any) -> Any:
        """The value converted to the default's type; ValueError naming the option if it is bad."""
        where = f"tuner {tuner!r}: option {self.name!r}"
        value = _coerce(where, self.default, value)
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(repr(c) for c in self.choices)
            raise ValueError(f"{where} must be one of {allowed}; got {value!r}")
        if self.minimum is not None and value < self.minimum:
            raise ValueError(f"{where} must be >= {self.minimum}; got {value!r}")
        if self.maximum is not None and value > self.maximum:
            raise ValueError(f"{where} must be <= {self.maximum}; got {value!r}")
        return value

    def describe(self) -> dict[str, Any]:
        """JSON-able form for `--help`, the REST API and the docs."""
        out: dict[str, Any] = {"name": self.name, "description": self.description,
                               "default": self.default}
        if self.choices is not None:
            out["choices"] = list(self.choices)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out


def _coerce(where: str, default: Any, value: Any) -> Any:
    # bool before int: bool is an int subclass, and True as a population size is a mistake.
    kind = type(default)
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        # NaN passes every bound check, and infinity every lower one: only finite numbers.
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and math.isfinite(number := _as_float(value)):
            return number
    elif kind is str:
        if isinstance(value, str):
            return value
    else:  # default None or another type: accept as given
        return value
    what = "a finite float" if kind is float else kind.__name__
    raise ValueError(f"{where} must be {what}; got {type(value).__name__} "
                     f"{reprlib.repr(value)}")


def _as_float(value: float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond the float range
        return math.inf


def resolve_options(tuner: str, table: Sequence[Option],
                    given: Mapping[str, Any]) -> Mapping[str, Any]:
    """Defaults from ``table`` overridden by checked ``given`` values (read-only mapping)."""
    known = {opt.name: opt for opt in table}
    for name in given:
        if name not in known:
            names = ", ".join(known) or "none"
            raise ValueError(f"tuner {tuner!r} has no option {name!r}; its options: {names}")
    values = {opt.name: opt.check(tuner, given[opt.name]) if opt.name in given else opt.default
              for opt in table}
    return MappingProxyType(values)
