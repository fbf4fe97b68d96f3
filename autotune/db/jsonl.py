"""JSON-lines export/import of trial records (one object per line; floats round-trip exactly)."""
from __future__ import annotations

import json
from typing import IO, Any, Callable, Mapping, Optional

from sqlalchemy.orm import Session

from autotune.db.entities import ensure_target, ensure_workload, target_kind_of
from autotune.db.records import TrialRecord
from autotune.db.schema import utcnow
from autotune.jsonlines import parse_lines
from autotune.db.trials import insert_rows, iter_trials

_BATCH = 500


def canonical_workload_key(obj: Mapping[str, Any]) -> str:
    """The database key of an exported workload object.

    Uses ``autotune.ops.Workload`` when it knows the workload, so the key matches what the
    tuner writes; otherwise compact JSON with sorted keys.
    """
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    try:
        from autotune.ops import Workload  # deferred: ops sits below the database layer

        return str(Workload.from_json(text).key)
    except (ImportError, AttributeError, ValueError, TypeError, KeyError):
        return text


def record_to_json(record: TrialRecord) -> dict[str, Any]:
    """The exported form of a record (job ids and row ids are local, so not exported)."""
    return {
        "workload": json.loads(record.workload_key),
        "target": record.target_key,
        "config": record.config,
        "costs": list(record.costs),
        "cost": record.cost,
        "gflops": record.gflops,
        "error": record.error,
        "error_msg": record.error_msg,
        "build_s": record.build_s,
        "run_s": record.run_s,
        "timestamp": record.timestamp,
        "extra": record.extra,
        "worker": record.worker,
    }


def export_jsonl(session: Session, fp: IO[str], *, workload_key: Optional[str] = None,
                 target_key: Optional[str] = None) -> int:
    """Write records (optionally of one workload/target) to ``fp`` in id order; returns count."""
    count = 0
    for record in iter_trials(session, workload_key=workload_key, target_key=target_key):
        # json writes floats with repr(), the shortest string that parses back to the same float.
        fp.write(json.dumps(record_to_json(record)) + "\n")
        count += 1
    return count


def _row(obj: dict[str, Any], number: int, workload_id: int, target_id: int) -> dict[str, Any]:
    try:
        config = dict(obj["config"])
        config_key = str(int(config["index"]))
        costs = [float(c) for c in obj.get("costs", [])]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"line {number}: bad config or costs ({exc})") from None
    return {
        "workload_id": workload_id,
        "target_id": target_id,
        "job_id": None,
        "config_key": config_key,
        "config": config,
        "costs": costs,
        "cost": obj.get("cost"),
        "gflops": obj.get("gflops"),
        "error": str(obj.get("error", "none")),
        "error_msg": str(obj.get("error_msg", "")),
        "build_s": float(obj.get("build_s", 0.0)),
        "run_s": float(obj.get("run_s", 0.0)),
        "timestamp": float(obj.get("timestamp", 0.0)),
        "extra": dict(obj.get("extra") or {}),
        "created_at": utcnow(),
        # Exports from before trials.worker have no such field: None.
        "worker": None if obj.get("worker") is None else str(obj["worker"])[:200],
    }


def import_jsonl(session: Session, fp: IO[str], *,
                 workload_key: Callable[[Mapping[str, Any]], str] = canonical_workload_key) -> int:
    """Insert the records in ``fp``, skipping configs already recorded; returns inserted count."""
    workload_ids: dict[str, int] = {}
    target_ids: dict[str, int] = {}
    pending: list[dict[str, Any]] = []
    inserted = 0
    for number, obj in parse_lines(fp):
        workload, target = obj.get("workload"), obj.get("target")
        if not isinstance(workload, dict) or not isinstance(target, str):
            raise ValueError(f"line {number}: needs a 'workload' object and a 'target' string")
        wkey = workload_key(workload)
        if wkey not in workload_ids:
            workload_ids[wkey] = ensure_workload(session, key=wkey, op=str(workload.get("op", "")))
        if target not in target_ids:
            target_ids[target] = ensure_target(session, key=target, kind=target_kind_of(target))
        pending.append(_row(obj, number, workload_ids[wkey], target_ids[target]))
        if len(pending) >= _BATCH:
            inserted += insert_rows(session, rows=pending)
            pending = []
    return inserted + insert_rows(session, rows=pending)
