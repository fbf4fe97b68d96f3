"""`ReplayExecutor`: answers measurements from recorded trials instead of hardware.

Tuners can then be tested and compared without a device (Kernel Tuner's simulation mode).
Records come from a database (``from_db``), an exported JSON-lines file (``from_jsonl``,
plain or gzip) or any iterable of `TrialRecord`-like objects or exported dicts. Only the
workload key and config index identify a record: a recording replays on any target.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, Union

from autotune.measure.executor import Executor
from autotune.measure.result import ErrorKind, MeasureInput, MeasureResult
from autotune.records import canonical_workload_key, record_from_json
from autotune.records.files import parse_lines, read_lines

NOT_IN_POOL = "not in replay pool"


def _record(record: Any) -> Any:
    """A `TrialRecord` (or one like it) of a record or an exported dict."""
    return record_from_json(record) if isinstance(record, Mapping) else record


class ReplayExecutor(Executor):
    """An `Executor` over recorded trials; a config never recorded fails with INSTANTIATION.

    Raises ValueError when one workload's config was recorded on two targets (ambiguous):
    filter by target first (``from_db``/``from_jsonl`` take one).
    """

    def __init__(self, records: Iterable[Any]) -> None:
        self._results: dict[tuple[str, int], MeasureResult] = {}
        targets: dict[tuple[str, int], str] = {}
        for record in map(_record, records):
            key = (record.workload_key, record.config_index)
            if key in targets and targets[key] != record.target_key:
                raise ValueError(f"replay: config {key[1]} of {key[0]} recorded on targets "
                                 f"{targets[key]!r} and {record.target_key!r}; choose one target")
            targets[key] = record.target_key
            self._results[key] = MeasureResult.from_record(record)
        self.submitted = 0  # configs answered so far (a test and benchmark aid)

    @classmethod
    def from_db(cls, db: Any, workload: Any, target: Any) -> "ReplayExecutor":
        """Replay the records of ``workload`` on ``target`` in a `Database`."""
        return cls(db.trials_for(workload, target))

    @classmethod
    def from_jsonl(cls, path: Union[str, Path], *, workload: Any = None,
                   target: Any = None) -> "ReplayExecutor":
        """Replay an exported JSON-lines file (gzip detected), optionally one workload/target."""
        wkey = None if workload is None else canonical_workload_key(workload)
        tkey = None if target is None else (target if isinstance(target, str) else target.key)
        with read_lines(path) as fp:
            records = [obj for _, obj in parse_lines(fp)
                       if (wkey is None or canonical_workload_key(obj["workload"]) == wkey)
                       and (tkey is None or obj.get("target") == tkey)]
        return cls(records)

    def __len__(self) -> int:
        return len(self._results)

    @property
    def indices(self) -> frozenset[int]:
        """Recorded config indices (of every workload in the pool; see `indices_for`)."""
        return frozenset(index for _, index in self._results)

    def indices_for(self, workload: Any) -> frozenset[int]:
        """Recorded config indices of one workload: restrict a tuner to these (``pool=``)."""
        wkey = canonical_workload_key(workload)
        return frozenset(index for key, index in self._results if key == wkey)

    def submit(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        """The recorded result of each input, or an INSTANTIATION failure when not recorded."""
        out = []
        for inp in inputs:
            found = self._results.get((canonical_workload_key(inp.workload), inp.config.index))
            if found is None:
                out.append(MeasureResult.failure(ErrorKind.INSTANTIATION, NOT_IN_POOL))
            else:
                out.append(dataclasses.replace(found, extra={**found.extra, "replayed": True}))
        self.submitted += len(inputs)
        return out

    def close(self) -> None:
        """Nothing to release."""
