"""The JSON form of a `TrialRecord` (exports, REST trial bodies, replay dicts), and the
canonical key of a workload given in any of its forms."""
from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Protocol, Union

from autotune.ops import Workload
from autotune.records.trial import TrialRecord

# ErrorKind's values (autotune.measure.result, which sits above this module).
ERROR_KINDS = ("none", "instantiation", "compile", "runtime", "wrong_answer", "build_timeout",
               "run_timeout", "transient")


class HasKey(Protocol):
    @property
    def key(self) -> str: ...


def known_workload(obj: Mapping[str, Any]) -> Any:
    """The `autotune.ops.Workload` of an exported workload object, or None when this
    version does not know it."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"))
    try:
        return Workload.from_json(text)
    except (AttributeError, ValueError, TypeError, KeyError, RecursionError):
        return None


def canonical_workload_key(obj: Union[str, Mapping[str, Any], HasKey]) -> str:
    """The database key of a workload given as a key, an exported (wire) object or a `Workload`.

    An object is read with ``autotune.ops.Workload`` when it knows the workload, so the key
    matches what the tuner writes; otherwise it is compact JSON with sorted keys.
    """
    if isinstance(obj, str):
        return obj
    if not isinstance(obj, Mapping):
        return obj.key
    known = known_workload(obj)
    if known is not None:
        return str(known.key)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


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


def record_from_json(obj: Mapping[str, Any], *, workload_key: Optional[str] = None,
                     target_key: Optional[str] = None) -> TrialRecord:
    """A `TrialRecord` from a trusted JSON form: an exported line, a REST trial body or a
    replay dict. ``workload_key`` and ``target_key`` stand in for fields the form lacks.

    Lenient where `import_jsonl` is strict (it checks untrusted lines); ValueError
    when a record has no workload or no config index.
    """
    config = dict(obj.get("config") or {})
    index = obj.get("config_index", config.get("index"))
    workload = obj.get("workload_key") or obj.get("workload") or workload_key
    if workload is None or index is None:
        raise ValueError(f"a record needs a workload and a config index: {dict(obj)!r:.200}")
    cost, gflops = obj.get("cost"), obj.get("gflops")
    return TrialRecord(
        workload_key=canonical_workload_key(workload),
        target_key=str(obj.get("target_key") or obj.get("target") or target_key or ""),
        config=config, config_index=int(index),
        costs=tuple(float(c) for c in obj.get("costs") or ()),
        cost=None if cost is None else float(cost),
        gflops=None if gflops is None else float(gflops),
        error=str(obj.get("error") or "none"), error_msg=str(obj.get("error_msg") or ""),
        build_s=float(obj.get("build_s") or 0.0), run_s=float(obj.get("run_s") or 0.0),
        timestamp=float(obj.get("timestamp") or 0.0), job_id=obj.get("job_id"),
        extra=dict(obj.get("extra") or {}), id=obj.get("id"), worker=obj.get("worker"))
