"""What every knob shares: candidate lookup, JSON conversion, neighbour steps."""
from __future__ import annotations

from typing import Any, ClassVar

# How many candidates `describe()` lists before truncating (a UI hint, not a limit).
DESCRIBE_LIMIT = 16


def to_json_value(value: Any) -> Any:
    """Convert a knob value to its JSON form: tuples become lists, recursively."""
    if isinstance(value, tuple):
        return [to_json_value(v) for v in value]
    return value


def from_json_value(value: Any) -> Any:
    """Convert a JSON knob value back: lists become tuples, recursively."""
    if isinstance(value, list):
        return tuple(from_json_value(v) for v in value)
    return value


class KnobBase:
    """Mixin for the knob dataclasses; each sets `name` and calls `_set_candidates`."""

    kind: ClassVar[str] = ""
    name: str
    # Filled in __post_init__ of each concrete knob (value -> position).
    _index: dict[Any, int]

    @property
    def candidates(self) -> tuple[Any, ...]:
        raise NotImplementedError

    def _set_candidates(self, candidates: tuple[Any, ...]) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"knob name must be a non-empty string, got {self.name!r}")
        if not candidates:
            raise ValueError(f"knob {self.name!r} has no candidates")
        index: dict[Any, int] = {}
        for i, c in enumerate(candidates):
            if c in index:
                raise ValueError(f"knob {self.name!r}: duplicate candidate {c!r}")
            index[c] = i
        # Frozen dataclass: derived lookup tables are set once, here.
        object.__setattr__(self, "_index", index)

    def __len__(self) -> int:
        return len(self._index)

    def index_of(self, value: Any) -> int:
        """Position of `value` among the candidates; ValueError naming the knob if absent."""
        try:
            return self._index[value]
        except KeyError:
            pass
        except TypeError:  # unhashable, e.g. a JSON list for a tuple-valued knob
            try:
                return self._index[self.from_json_value(value)]
            except (KeyError, TypeError, ValueError):
                pass
        raise ValueError(f"knob {self.name!r}: {value!r} is not a candidate")

    def to_json_value(self, value: Any) -> Any:
        """JSON form of a candidate value."""
        return to_json_value(value)

    def from_json_value(self, value: Any) -> Any:
        """Candidate value from its JSON form (not validated; see `index_of`)."""
        return from_json_value(value)

    def neighbor_positions(self, pos: int) -> tuple[int, ...]:
        """Candidate positions one step from `pos` (here: the adjacent ones)."""
        return tuple(p for p in (pos - 1, pos + 1) if 0 <= p < len(self._index))

    def describe(self, limit: int = DESCRIBE_LIMIT) -> dict[str, Any]:
        """A JSON-able summary for the UI, with the candidate list truncated."""
        cands = self.candidates
        return {
            "name": self.name,
            "kind": self.kind,
            "size": len(cands),
            "candidates": [self.to_json_value(c) for c in cands[:limit]],
            "truncated": len(cands) > limit,
            **self._describe_params(),
        }

    def _describe_params(self) -> dict[str, Any]:
        return {}
