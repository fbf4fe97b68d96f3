"""`ReplayExecutor`: answers measurements from recorded trials instead of hardware.

Tuners can then be tested and compared without a device (Kernel Tuner's simulation mode).
Records come from a database (``from_db``), an exported JSON-lines file (``from_jsonl``,
plain or gzip) or any iterable of `TrialRecord`-like objects or exported dicts. Only the
workload key and config index identify a record: a recording replays on any target.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union

from autotune.jsonlines import open_text, parse_lines
from autotune.measure.result import ErrorKind, MeasureInput, MeasureResult

NOT_IN_POOL = "not in replay pool"
_GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class _Entry:
    costs: tuple[float, ...]
    error: ErrorKind
    error_msg: str = ""
    build_s: float = 0.0
    run_s: float = 0.0
    timestamp: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)


def _workload_key(obj: Any) -> str:
    """Canonical key of a workload given as a key string, a wire dict or a Workload."""
    if isinstance(obj, str):
        return obj
    if isinstance(obj, Mapping):
        from autotune.ops import Workload  # deferred: only exported dicts need parsing
        try:
            return Workload.from_dict(obj).key
        except ValueError:
            return json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return str(obj.key)


def _get(record: Any, name: str, default: Any = None) -> Any:
    if isinstance(record, Mapping):
        return record.get(name, default)
    return getattr(record, name, default)


def _entry(record: Any) -> tuple[str, str, int, _Entry]:
    """(workload key, target key, config index, entry) of a TrialRecord or an exported dict."""
    workload = _get(record, "workload_key") or _get(record, "workload")
    target = _get(record, "target_key") or _get(record, "target") or ""
    config = _get(record, "config") or {}
    index = _get(record, "config_index", config.get("index"))
    if workload is None or index is None:
        raise ValueError(f"replay: record needs a workload and a config index: {record!r:.200}")
    try:
        error = ErrorKind(str(_get(record, "error", "none")))
    except ValueError:
        error = ErrorKind.RUNTIME  # an unknown kind is still a failure
    entry = _Entry(
        costs=tuple(float(c) for c in _get(record, "costs", ()) or ()),
        error=error,
        error_msg=str(_get(record, "error_msg", "") or ""),
        build_s=float(_get(record, "build_s", 0.0) or 0.0),
        run_s=float(_get(record, "run_s", 0.0) or 0.0),
        timestamp=float(_get(record, "timestamp", 0.0) or 0.0),
        extra=dict(_get(record, "extra", {}) or {}),
    )
    return _workload_key(workload), str(target), int(index), entry


class ReplayExecutor:
    """An `Executor` over recorded trials; a config never recorded fails with INSTANTIATION.

    Raises ValueError when one workload's config was recorded on two targets (ambiguous):
    filter by target first (``from_db``/``from_jsonl`` take one).
    """

    def __init__(self, records: Iterable[Any]) -> None:
        self._entries: dict[tuple[str, int], _Entry] = {}
        targets: dict[tuple[str, int], str] = {}
        for record in records:
            wkey, tkey, index, entry = _entry(record)
            key = (wkey, index)
            if key in targets and targets[key] != tkey:
                raise ValueError(f"replay: config {index} of {wkey} recorded on targets "
                                 f"{targets[key]!r} and {tkey!r}; choose one target")
            targets[key] = tkey
            self._entries[key] = entry
        self.submitted = 0  # configs answered so far (a test and benchmark aid)

    @classmethod
    def from_db(cls, db: Any, workload: Any, target: Any) -> "ReplayExecutor":
        """Replay the records of ``workload`` on ``target`` in a `Database`."""
        return cls(db.trials_for(workload, target))

    @classmethod
    def from_jsonl(cls, path: Union[str, Path], *, workload: Any = None,
                   target: Any = None) -> "ReplayExecutor":
        """Replay an exported JSON-lines file (gzip detected), optionally one workload/target."""
        wkey = None if workload is None else _workload_key(workload)
        tkey = None if target is None else (target if isinstance(target, str) else target.key)
        with open_text(path, "r") as fp:
            records = [obj for _, obj in parse_lines(fp)
                       if (wkey is None or _workload_key(obj.get("workload")) == wkey)
                       and (tkey is None or obj.get("target") == tkey)]
        return cls(records)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def indices(self) -> frozenset[int]:
        """Recorded config indices (of every workload in the pool; see `indices_for`)."""
        return frozenset(index for _, index in self._entries)

    def indices_for(self, workload: Any) -> frozenset[int]:
        """Recorded config indices of one workload: restrict a tuner to these (``pool=``)."""
        wkey = _workload_key(workload)
        return frozenset(index for key, index in self._entries if key == wkey)

    def submit(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        """The recorded result of each input, or an INSTANTIATION failure when not recorded."""
        out = []
        for inp in inputs:
            entry = self._entries.get((_workload_key(inp.workload), inp.config.index))
            if entry is None:
                out.append(MeasureResult.failure(ErrorKind.INSTANTIATION, NOT_IN_POOL))
                continue
            out.append(MeasureResult(costs=entry.costs, error=entry.error,
                                     error_msg=entry.error_msg, build_s=entry.build_s,
                                     run_s=entry.run_s, timestamp=entry.timestamp,
                                     extra={**entry.extra, "replayed": True}))
        self.submitted += len(inputs)
        return out

    def close(self) -> None:
        """Nothing to release."""
