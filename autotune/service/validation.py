"""Semantic checks of requests (ops table, target specs, tuners), reported like pydantic's.

Each failure becomes a 422 whose ``detail`` entry has the ``loc`` of the field at fault, e.g.
``["body", "workload", "params", "K"]``, so clients see which field to fix.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import numpy as np
from fastapi.exceptions import RequestValidationError

from autotune.ops import Workload
from autotune.service.schemas import JobCreate, WorkloadIn
from autotune.target import Target

# A workload whose arrays exceed this many elements (1 GiB of float32) is refused.
MAX_ELEMENTS = 2**28

Loc = tuple[Any, ...]


@dataclass(frozen=True)
class JobSpec:
    """A checked job request: real workload and target objects, tuner and its options."""

    workload: Workload
    target: Target
    tuner: str
    trials: int
    options: dict[str, Any]


def invalid(loc: Sequence[Any], msg: str, kind: str = "value_error") -> RequestValidationError:
    """A 422 error naming the field at ``loc``."""
    return RequestValidationError([{"type": kind, "loc": tuple(loc), "msg": msg, "input": None}])


def _workload_field(msg: str) -> Loc:
    """Which field of the workload a ValueError message from autotune.ops is about."""
    found = re.search(r"parameter '([^']+)'", msg)
    if found:
        return ("params", found.group(1))
    found = re.search(r"unknown field '([^']+)'", msg)
    if found:
        return (found.group(1),)
    for name in ("op", "dtype", "epilogue", "params"):
        if f"unknown {name}" in msg or f"field '{name}'" in msg:
            return (name,)
    if "dtype" in msg:
        return ("dtype",)
    if "epilogue" in msg:
        return ("epilogue",)
    return ("params",)


def check_workload(data: Mapping[str, Any], loc: Loc) -> Workload:
    """A validated Workload from its wire form, or a 422 naming the bad field."""
    try:
        wl = Workload.from_dict(data)
    except ValueError as err:
        raise invalid((*loc, *_workload_field(str(err))), str(err)) from None
    elements = sum(int(np.prod(arg.shape)) for arg in wl.arg_specs)
    if elements > MAX_ELEMENTS:
        raise invalid((*loc, "params"), f"workload too large: its arrays hold {elements} "
                      f"elements; the service accepts at most {MAX_ELEMENTS}")
    return wl


def check_target(spec: str, loc: Loc) -> Target:
    """A Target from its spec, or a 422 at ``loc``."""
    try:
        return Target(spec)
    except ValueError as err:
        raise invalid(loc, str(err)) from None


def check_space(wl: Workload, target: Target, loc: Loc) -> None:
    """422 when no schedule template covers the op on this kind of target."""
    from autotune import driver

    try:
        driver.space(wl, target)
    except (ValueError, KeyError, NotImplementedError) as err:
        raise invalid(loc, f"{wl.op} cannot be tuned on {target.kind} targets: {err}") from None


def check_tuner(name: str, options: Mapping[str, Any]) -> None:
    """422 at ``tuner`` for an unknown tuner, at ``options.<name>`` for a bad option."""
    from autotune.search.options import resolve_options
    from autotune.search.registry import TUNERS, tuner_options

    if name not in TUNERS:
        raise invalid(("body", "tuner"), f"unknown tuner {name!r}; known tuners: "
                      f"{', '.join(TUNERS)}")
    try:
        resolve_options(name, tuner_options(name), options)
    except ValueError as err:
        found = re.search(r"option '([^']+)'", str(err))
        where = ("body", "options", found.group(1)) if found else ("body", "options")
        raise invalid(where, str(err)) from None


def check_job(body: JobCreate) -> JobSpec:
    """Every semantic check of a submitted job, in the order a reader fixes them."""
    wl = check_workload(body.workload.model_dump(), ("body", "workload"))
    target = check_target(body.target, ("body", "target"))
    from autotune.search.registry import DEFAULT_TUNER

    tuner = body.tuner or DEFAULT_TUNER
    check_tuner(tuner, body.options)
    check_space(wl, target, ("body", "workload", "op"))
    options = {"seed": body.seed, "early_stopping": body.early_stopping,
               "transfer": body.transfer, "tuner_options": dict(body.options)}
    return JobSpec(wl, target, tuner, body.trials, options)


def parse_workload_query(text: str, loc: Loc = ("query", "workload")) -> Workload:
    """A Workload from a JSON query parameter, or a 422 naming the field."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise invalid(loc, f"workload: not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise invalid(loc, "workload: expected a JSON object")
    try:
        WorkloadIn.model_validate(data)
    except Exception as err:  # pydantic.ValidationError: re-rooted under ``loc``
        errors = getattr(err, "errors", lambda: [])()
        first: Optional[dict[str, Any]] = errors[0] if errors else None
        raise invalid((*loc, *(first["loc"] if first else ())),
                      first["msg"] if first else str(err)) from None
    return check_workload(data, loc)
