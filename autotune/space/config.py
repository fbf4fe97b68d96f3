"""Config: one point of a ConfigSpace, a frozen mapping of knob name to value."""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.space.base import from_json_value, to_json_value

if TYPE_CHECKING:
    from autotune.space.configspace import ConfigSpace


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Config(Mapping[str, Any]):
    """Knob values plus `index`, the config's mixed-radix index in its space.

    Equal when index and knob items are equal; the hash is the index alone
    (unique within a space), which keeps sets and dicts of configs cheap.
    """

    index: int
    names: tuple[str, ...]
    knob_values: tuple[Any, ...]
    # name -> position; a ConfigSpace shares one dict among all its configs, so
    # `cfg._pos is space._pos` cheaply tells the space the digits below are its own.
    _pos: dict[str, int] = field(init=False, compare=False)
    # Candidate positions per knob when made by a space, else None.
    _digits: tuple[int, ...] | None = field(init=False, compare=False)

    def __post_init__(self) -> None:
        names, values = tuple(self.names), tuple(self.knob_values)
        if len(names) != len(values):
            raise ValueError(f"config: {len(names)} names but {len(values)} values")
        pos = {n: i for i, n in enumerate(names)}
        if len(pos) != len(names):
            raise ValueError(f"config: repeated knob name in {names!r}")
        set_ = object.__setattr__
        set_(self, "index", int(self.index))
        set_(self, "names", names)
        set_(self, "knob_values", values)
        set_(self, "_pos", pos)
        set_(self, "_digits", None)

    @classmethod
    def _make(
        cls, index: int, names: tuple[str, ...], values: tuple[Any, ...],
        pos: dict[str, int], digits: tuple[int, ...],
    ) -> Config:
        # Unchecked constructor for ConfigSpace's hot paths (get, sample, neighbours).
        self = object.__new__(cls)
        set_ = object.__setattr__
        set_(self, "index", index)
        set_(self, "names", names)
        set_(self, "knob_values", values)
        set_(self, "_pos", pos)
        set_(self, "_digits", digits)
        return self

    # Mapping protocol
    def __getitem__(self, name: str) -> Any:
        return self.knob_values[self._pos[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self._pos

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        if self.index != other.index:
            return False
        if self.names == other.names:
            return self.knob_values == other.knob_values
        return dict(zip(self.names, self.knob_values)) == dict(zip(other.names, other.knob_values))

    def __hash__(self) -> int:
        return hash(self.index)

    def __repr__(self) -> str:
        items = ", ".join(f"{n}={v!r}" for n, v in zip(self.names, self.knob_values))
        return f"Config(index={self.index}, {items})"

    # JSON
    def to_dict(self) -> dict[str, Any]:
        """`{"index": i, "knobs": {name: json value}}` (tuples become lists)."""
        knobs = {n: to_json_value(v) for n, v in zip(self.names, self.knob_values)}
        return {"index": self.index, "knobs": knobs}

    def to_json(self) -> str:
        """Compact JSON with sorted keys (stable, so usable as a database key)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: str | Mapping[str, Any], space: ConfigSpace | None = None) -> Config:
        """Parse `to_json`/`to_dict` output.

        With `space`, the knob values are validated and the index re-derived
        (ValueError on a bad knob, value or index); without, the index is trusted.
        """
        obj = json.loads(data) if isinstance(data, str) else data
        if not isinstance(obj, Mapping) or not isinstance(obj.get("knobs"), Mapping):
            raise ValueError("config JSON needs a 'knobs' object")
        knobs: Mapping[str, Any] = obj["knobs"]
        stored = obj.get("index")
        if stored is not None and (isinstance(stored, bool) or not isinstance(stored, int)):
            raise ValueError(f"config JSON: index must be an int, got {stored!r}")
        if space is not None:
            cfg = space.config(knobs)
            if stored is not None and stored != cfg.index:
                raise ValueError(
                    f"config JSON: stored index {stored} does not match knob values "
                    f"(index {cfg.index} in space {space.name!r})"
                )
            return cfg
        if stored is None:
            raise ValueError("config JSON needs an 'index' when no space is given")
        return cls(stored, tuple(knobs), tuple(from_json_value(v) for v in knobs.values()))
