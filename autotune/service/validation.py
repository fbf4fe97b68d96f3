"""Semantic checks of requests (ops table, target specs, tuners), reported like pydantic's.

Each failure becomes a 422 whose ``detail`` entry has the ``loc`` of the field at fault, e.g.
``["body", "workload", "params", "K"]``, so clients see which field to fix.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any, Callable, Mapping, Optional, Sequence

from fastapi import HTTPException, Path, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute

from autotune import driver
from autotune.job_options import JobOptions, MeasureOverrides
from autotune.measure.capability import measure_refusal
from autotune.ops import Workload, WorkloadError
from autotune.search.options import resolve_options
from autotune.search.registry import DEFAULT_TUNER, TUNERS, tuner_options
from autotune.service.schemas import JobCreate, WorkloadIn
from autotune.target import Target

# Workload bounds, computed in Python ints (numpy's int64 products wrap around). Every
# parameter and every array dimension (the padded input's too) is at most MAX_EXTENT: the
# config space factors these extents (`space/split.py`; the most divisible extent below 2**20
# takes ~0.25 s on a 4-level GPU split, where 2**61 took minutes of trial division).
MAX_EXTENT = 2**20
# The arrays, padded input included, hold at most this many elements (1 GiB of float32).
MAX_ELEMENTS = 2**28
# At most this many FLOPs per call (an 8192^3 matmul): the numpy reference and one timed run
# stay within seconds to minutes.
MAX_FLOPS = 2**40
# Ids (jobs, trials, event ids) are 64-bit signed in the database; offsets are bounded lower.
MAX_ID = 2**63 - 1
MAX_OFFSET = 2**31 - 1
# JSON nested deeper than this is refused before anything recurses over it.
MAX_JSON_DEPTH = 32

JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="job id")]

Loc = tuple[Any, ...]


@dataclass(frozen=True)
class JobSpec:
    """A checked job request: real workload and target objects, and how the job tunes."""

    workload: Workload
    target: Target
    options: JobOptions


def invalid(loc: Sequence[Any], msg: str, kind: str = "value_error") -> RequestValidationError:
    """A 422 error naming the field at ``loc``."""
    return RequestValidationError([{"type": kind, "loc": tuple(loc), "msg": msg, "input": None}])


def check_workload(data: Mapping[str, Any], loc: Loc) -> Workload:
    """A validated Workload from its wire form, or a 422 naming the bad field."""
    try:
        wl = Workload.from_dict(data)
    except WorkloadError as err:
        raise invalid((*loc, *err.loc), str(err)) from None
    for name, value in wl.params.items():
        if max(value if isinstance(value, tuple) else (value,)) > MAX_EXTENT:
            raise invalid((*loc, "params", name), f"{wl.op}: parameter {name!r} must be "
                          f"at most {MAX_EXTENT}")
    shapes = [arg.shape for arg in wl.arg_specs] + _padded_shapes(wl)
    longest = max(max(shape, default=1) for shape in shapes)
    if longest > MAX_EXTENT:
        raise invalid((*loc, "params"), f"workload too large: an array dimension is "
                      f"{longest}; the service accepts at most {MAX_EXTENT}")
    elements = sum(math.prod(shape) for shape in shapes)
    if elements > MAX_ELEMENTS:
        raise invalid((*loc, "params"), f"workload too large: its arrays hold {elements} "
                      f"elements; the service accepts at most {MAX_ELEMENTS}")
    flops = wl.flops()  # exact: the output's size is bounded above, the rest are Python ints
    if flops > MAX_FLOPS:
        raise invalid((*loc, "params"), f"workload too large: {flops} FLOPs per call; the "
                      f"service accepts at most {MAX_FLOPS}")
    return wl


def _padded_shapes(wl: Workload) -> list[tuple[int, ...]]:
    """The zero-padded copy of a convolution's input (NCHW, or NCHW[x]c: a block of channels
    last), which a schedule may allocate."""
    pad = wl.params.get("pad")
    if not isinstance(pad, tuple) or pad == (0, 0):
        return []
    n, c, h, w, *block = wl.arg_specs[0].shape
    return [(n, c, h + 2 * pad[0], w + 2 * pad[1], *block)]


def check_target(spec: str, loc: Loc, *, measured_here: bool = False) -> Target:
    """A Target from its spec, or a 422 at ``loc``; with ``measured_here`` (jobs measure on
    this host, not on a Ray cluster), also a 422 saying why this host cannot measure it."""
    try:
        target = Target(spec)
    except ValueError as err:
        raise invalid(loc, str(err)) from None
    if measured_here:
        reason = measure_refusal(target, ray_address=None)
        if reason:
            raise invalid(loc, f"target: {reason}")
    return target


def check_dtype(wl: Workload, target: Target, loc: Loc) -> None:
    """422 at ``<loc>.dtype`` when ``target`` cannot run the workload's dtype (half on a
    CPU target, bfloat16 below sm_80)."""
    try:
        wl.check_target(target)
    except WorkloadError as err:
        raise invalid((*loc, *err.loc), str(err)) from None


def check_space(wl: Workload, target: Target, loc: Loc) -> None:
    """422 when no schedule template covers the op on this kind of target (at ``loc``), or
    the workload's form has none there (at the field the `WorkloadError` names: an NHWC conv
    off Hopper's half kernels at ``layout``)."""
    try:
        driver.config_space(wl, target)
    except WorkloadError as err:
        raise invalid((*loc[:-1], *err.loc) if err.loc else loc, str(err)) from None
    except (ValueError, KeyError, NotImplementedError) as err:
        raise invalid(loc, f"{wl.op} cannot be tuned on {target.kind} targets: {err}") from None


def check_tuner(name: str, options: Mapping[str, Any]) -> None:
    """422 at ``tuner`` for an unknown tuner, at ``tuner_options.<name>`` for a bad option."""
    if name not in TUNERS:
        raise invalid(("body", "tuner"), f"unknown tuner {name!r}; known tuners: "
                      f"{', '.join(TUNERS)}")
    table = tuner_options(name)
    for option, value in options.items():  # one at a time: the error names its option
        try:
            resolve_options(name, table, {option: value})
        except ValueError as err:
            raise invalid(("body", "tuner_options", option), str(err)) from None


def check_measure_options(options: MeasureOverrides, *, measured_here: bool) -> None:
    """422 at ``measure_options`` when the job is measured on a Ray cluster (its workers
    time with their own settings); each option's bounds are the schema's."""
    if options.given() and not measured_here:
        raise invalid(("body", "measure_options"), "this service measures on a Ray cluster, "
                      "whose workers time with their own AUTOTUNE_* settings: leave "
                      "measure_options out")


def check_job(body: JobCreate, *, measured_here: bool = False) -> JobSpec:
    """Every semantic check of a submitted job, in the order a reader fixes them
    (``measured_here``: see `check_target`)."""
    wl = check_workload(body.workload.model_dump(), ("body", "workload"))
    target = check_target(body.target, ("body", "target"), measured_here=measured_here)
    check_dtype(wl, target, ("body", "workload"))

    tuner = body.tuner or DEFAULT_TUNER
    check_tuner(tuner, body.tuner_options)
    measure = MeasureOverrides(**body.measure_options.given())  # bounded as the schema says
    check_measure_options(measure, measured_here=measured_here)
    check_space(wl, target, ("body", "workload", "op"))
    options = JobOptions(tuner=tuner, trials=body.trials, seed=body.seed,
                         early_stopping=body.early_stopping, transfer=body.transfer,
                         tuner_options=body.tuner_options, measure=measure)
    return JobSpec(wl, target, options)


def _json_number(text: str) -> int | float:
    """A JSON number with a fraction or exponent: an int when it is whole (JSON Schema's
    reading, by which 8.0 is an integer; the schema's bounds on ints stay in force), else a
    float. Checked in decimal, so that 1.0000000000000001 stays a float."""
    number = Decimal(text)
    if number.copy_abs() <= MAX_ID and number == number.to_integral_value():
        return int(number)
    return float(text)


def parse_json(text: str | bytes, loc: Loc) -> Any:
    """JSON text parsed, or a 422 at ``loc``: bad syntax, an integer beyond Python's
    int-string limit, or nesting deeper than MAX_JSON_DEPTH (before anything recurses).
    Whole numbers written with a fraction or exponent are ints (`_json_number`)."""
    try:
        data = json.loads(text, parse_float=_json_number)
    except json.JSONDecodeError as err:
        raise invalid(loc, f"not valid JSON: {err}", "json_invalid") from None
    except RecursionError:
        raise invalid(loc, f"JSON nested more than {MAX_JSON_DEPTH} levels deep",
                      "json_invalid") from None
    except UnicodeDecodeError as err:
        raise invalid(loc, f"not UTF-8 text: {err.reason}", "json_invalid") from None
    except ValueError:  # an integer literal beyond sys.get_int_max_str_digits()
        raise invalid(loc, f"an integer has more than {sys.get_int_max_str_digits()} "
                      "digits", "json_invalid") from None
    if _depth(data) > MAX_JSON_DEPTH:
        raise invalid(loc, f"JSON nested more than {MAX_JSON_DEPTH} levels deep",
                      "json_invalid")
    return data


def _depth(data: Any) -> int:
    # Iterative, so that checking the depth cannot itself run out of stack.
    deepest, todo = 0, [(data, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_JSON_DEPTH:
                todo.extend((v, depth + 1) for v in
                            (item.values() if isinstance(item, dict) else item))
    return deepest


class _JSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = parse_json(await self.body(), ("body",))
            except RequestValidationError as err:
                # Raised while FastAPI reads the body, only an HTTPException keeps its status.
                raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT,
                                    err.errors()) from None
        return self._json


class JSONBodyRoute(APIRoute):
    """A route whose JSON body is read by `parse_json`: every body it cannot parse is a
    422 at ``body`` saying why (FastAPI answers a bare 400 for most of them)."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(_JSONRequest(request.scope, request.receive))
        return route


def parse_workload_query(text: str, loc: Loc = ("query", "workload")) -> Workload:
    """A Workload from a JSON query parameter, or a 422 naming the field."""
    data = parse_json(text, loc)
    if not isinstance(data, dict):
        raise invalid(loc, "workload: expected a JSON object")
    try:
        WorkloadIn.model_validate(data)
    except Exception as err:  # pydantic.ValidationError: re-rooted under ``loc``
        errors: list[dict[str, Any]] = getattr(err, "errors", lambda: [])()
        first: Optional[dict[str, Any]] = errors[0] if errors else None
        raise invalid((*loc, *(first["loc"] if first else ())),
                      first["msg"] if first else str(err)) from None
    return check_workload(data, loc)
