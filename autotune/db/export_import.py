"""JSON-lines export/import of trial records (one object per line; floats round-trip exactly).

An import trusts no line: each is checked field by field, and ``cost`` and ``gflops`` are
recomputed from ``costs`` (and the workload's FLOPs) rather than read. For a workload this
version knows, the config must be a point of its template's space on the line's target (its
knobs, and its index theirs), and no cost may be below what the target could compute at
its peak (`autotune.target.peak`): a record that could hide every real one as the best is
never imported. The first bad line stops the import with `BadRecord` (its line number and
field) and nothing is imported: the import is one transaction.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional

from sqlalchemy.orm import Session

from autotune.db.entities import ensure_target, ensure_workload, target_kind_of
from autotune.db.schema import utcnow
from autotune.db.trials import insert_rows, iter_trials
from autotune.driver import config_space
from autotune.records.codec import (
    ERROR_KINDS,
    canonical_workload_key,
    known_workload,
    record_to_json,
)
from autotune.records.files import parse_lines
from autotune.target import Target
from autotune.target.peak import peak_flops

if TYPE_CHECKING:
    from autotune.space import ConfigSpace

_BATCH = 500


class BadRecord(ValueError):
    """A line that is not a valid record: ``line`` and ``field`` say where."""

    def __init__(self, line: int, field: str, problem: str) -> None:
        super().__init__(f"line {line}, field {field!r}: {problem}")
        self.line, self.field, self.problem = line, field, problem


def export_jsonl(session: Session, fp: IO[str], *, workload_key: Optional[str] = None,
                 target_key: Optional[str] = None) -> int:
    """Write records (optionally of one workload/target) to ``fp`` in id order; returns count."""
    count = 0
    for record in iter_trials(session, workload_key=workload_key, target_key=target_key):
        # json writes floats with repr(), the shortest string that parses back to the same float.
        fp.write(json.dumps(record_to_json(record)) + "\n")
        count += 1
    return count


def _number(obj: Mapping[str, Any], name: str, line: int, *, positive: bool = False) -> float:
    """A finite number >= 0 (> 0 when ``positive``); 0.0 when the field is absent."""
    value = obj.get(name, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRecord(line, name, f"must be a number, got {json.dumps(value)[:40]}")
    try:
        value = float(value)
    except OverflowError:  # an integer beyond any float
        value = math.inf
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise BadRecord(line, name, f"must be a finite number {'>' if positive else '>='} 0, "
                                    f"got {value}")
    return value


def _costs(obj: Mapping[str, Any], line: int, valid: bool) -> list[float]:
    costs = obj.get("costs", [])
    if not isinstance(costs, list):
        raise BadRecord(line, "costs", "must be a list of seconds")
    if valid and not costs:
        raise BadRecord(line, "costs", "a valid record (error 'none') needs at least one cost")
    return [_number({"costs": c}, "costs", line, positive=True) for c in costs]


def _text(obj: Mapping[str, Any], name: str, line: int, default: Optional[str]) -> Optional[str]:
    value = obj.get(name, default)
    if value is not None and not isinstance(value, str):
        raise BadRecord(line, name, "must be a string")
    return value


@dataclass(frozen=True)
class _Pair:
    """What an import checks a (workload, target) pair's records against: the workload's
    FLOPs, its template's space on the target, and the least cost the target could reach
    (None each where this version does not know the workload)."""

    flops: Optional[int] = None
    space: Optional["ConfigSpace"] = None
    least_cost: float = 0.0


def _pair(workload: Mapping[str, Any], target_key: str, line: int) -> _Pair:
    known = known_workload(workload)
    if known is None:  # an op of another version: nothing to check it against
        return _Pair()

    try:
        target = Target(target_key)
    except ValueError as err:
        raise BadRecord(line, "target", str(err)) from None
    try:
        space = config_space(known, target)
    except (ValueError, KeyError, NotImplementedError) as err:
        raise BadRecord(line, "workload", f"{known} has no schedule template on "
                                          f"{target.kind} targets: {err}") from None
    flops = int(known.flops())
    return _Pair(flops, space, flops / peak_flops(target, known.dtype))


def _check_point(config: Mapping[str, Any], index: int, space: "ConfigSpace") -> None:
    """ValueError unless config ``index`` is in ``space`` and has the knob values given.

    A record may lack a knob added to the space after it was measured, when the knob was
    added so that old configs keep their index (its first value, most significant: as
    split_k was to the tensor-core space); any knob it names must be the index's."""
    knobs = config.get("knobs")
    if not isinstance(knobs, dict):
        raise ValueError("it needs a 'knobs' object")
    if index >= space.size:
        raise ValueError(f"index {index} is beyond the space's {space.size} configs")
    point = space.get(index).to_dict()["knobs"]
    for name, value in knobs.items():
        if name not in point:
            raise ValueError(f"the space has no knob {name!r}")
        if value != point[name]:
            raise ValueError(f"knob {name!r} is {json.dumps(value)[:60]}, where config "
                             f"{index} has {json.dumps(point[name])}")


def _config(obj: dict[str, Any], number: int, pair: _Pair) -> tuple[dict[str, Any], int]:
    """The record's config and index, a point of its template's space where it is known."""
    config = obj.get("config")
    index = config.get("index") if isinstance(config, dict) else None
    if not isinstance(config, dict) or isinstance(index, bool) or not isinstance(index, int) \
            or index < 0:
        raise BadRecord(number, "config", "must be an object with an integer 'index' >= 0")
    if pair.space is not None:
        try:
            _check_point(config, index, pair.space)
        except ValueError as err:
            raise BadRecord(number, "config", f"not a config of its template's space "
                                              f"({err})") from None
    return config, index


def _row(obj: dict[str, Any], number: int, workload_id: int, target_id: int,
         pair: _Pair) -> dict[str, Any]:
    """A checked record's column values; `BadRecord` names the first bad field."""
    config, index = _config(obj, number, pair)
    error = obj.get("error", "none")
    if error not in ERROR_KINDS:
        raise BadRecord(number, "error", f"must be one of {', '.join(ERROR_KINDS)}; "
                                         f"got {json.dumps(error)[:40]}")
    costs = _costs(obj, number, error == "none")
    fastest = min(costs, default=math.inf)
    if fastest < pair.least_cost:
        raise BadRecord(number, "costs", f"{fastest:g} s is faster than the target can "
                                         f"compute the workload's {pair.flops} FLOPs "
                                         f"({pair.least_cost:g} s at its peak): not a "
                                         "measurement")
    flops = pair.flops
    extra = obj.get("extra") or {}
    if not isinstance(extra, dict):
        raise BadRecord(number, "extra", "must be an object")
    for name in ("cost", "gflops"):  # checked, then recomputed: a line's own may lie
        if obj.get(name) is not None:
            _number(obj, name, number, positive=name == "cost")
    # A failed record keeps the median of the costs it has (a config disqualified on
    # re-timing keeps its first timings), as the database wrote it.
    cost = statistics.median(costs) if costs else None
    gflops = None
    if error == "none" and cost is not None:
        gflops = flops / cost / 1e9 if flops is not None else _claimed_gflops(obj)
    worker = _text(obj, "worker", number, None)
    return {
        "workload_id": workload_id,
        "target_id": target_id,
        "job_id": None,
        "config_key": str(index),
        "config": config,
        "costs": costs,
        "cost": cost,
        "gflops": gflops,
        "error": error,
        "error_msg": _text(obj, "error_msg", number, ""),
        "build_s": _number(obj, "build_s", number),
        "run_s": _number(obj, "run_s", number),
        "timestamp": _number(obj, "timestamp", number),
        "extra": extra,
        "created_at": utcnow(),
        # Exports from before trials.worker have no such field: None.
        "worker": None if worker is None else worker[:200],
    }


def _claimed_gflops(obj: Mapping[str, Any]) -> Optional[float]:
    # A workload this version does not know has no FLOPs here: its line's value is shown
    # when it is a plausible number (nothing ranks by it; best() ranks by cost).
    value = obj.get("gflops")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def import_jsonl(session: Session, fp: Iterable[str], *,
                 workload_key: Callable[[Mapping[str, Any]], str] = canonical_workload_key) -> int:
    """Insert the records in ``fp``, skipping configs already recorded; returns inserted count.

    `BadRecord` (a ValueError) at the first line that is not a valid record; the caller's
    transaction then rolls back, so nothing of ``fp`` is imported."""
    workload_ids: dict[str, int] = {}
    pairs: dict[tuple[str, str], _Pair] = {}
    target_ids: dict[str, int] = {}
    pending: list[dict[str, Any]] = []
    inserted = 0
    for number, obj in parse_lines(fp):
        workload, target = obj.get("workload"), obj.get("target")
        if not isinstance(workload, dict):
            raise BadRecord(number, "workload", "must be an object")
        if not isinstance(target, str) or not target.strip():
            raise BadRecord(number, "target", "must be a non-empty string")
        wkey = workload_key(workload)
        if (wkey, target) not in pairs:
            pairs[wkey, target] = _pair(workload, target, number)
        if wkey not in workload_ids:
            workload_ids[wkey] = ensure_workload(session, key=wkey, op=str(workload.get("op", "")))
        if target not in target_ids:
            target_ids[target] = ensure_target(session, key=target, kind=target_kind_of(target))
        pending.append(_row(obj, number, workload_ids[wkey], target_ids[target],
                            pairs[wkey, target]))
        if len(pending) >= _BATCH:
            inserted += insert_rows(session, rows=pending)
            pending = []
    return inserted + insert_rows(session, rows=pending)
