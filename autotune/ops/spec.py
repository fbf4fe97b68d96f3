"""Operator and parameter specifications: the static description of each operator.

An `OpSpec` carries both the user-facing table (name, doc, parameters) and the
functions that give a workload its shapes, flop count and numpy reference.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from numbers import Integral
from typing import Any, Callable, Mapping, Sequence, Union

import numpy as np

from autotune.ops.dtypes import op_dtypes
from autotune.ops.epilogue import EPILOGUE_STAGES

ParamValue = Union[int, tuple[int, int]]
Params = Mapping[str, ParamValue]
Shape = tuple[int, ...]


class ParamError(ValueError):
    """A parameter that an op's check across parameters refuses: ``param`` names it (a
    `WorkloadError` then points at ``params.<param>``)."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ParamSpec:
    """One operator parameter: an int, or an (h, w) pair when `pair` is set."""

    name: str
    doc: str
    default: int | None = None  # None means required
    pair: bool = False
    minimum: int = 1
    # a parameter added after records existed: at its default it is left out of the key
    # and label (`Workload.to_dict`, `str`), so those records still match
    keyless_default: bool = False

    @property
    def required(self) -> bool:
        return self.default is None

    def normalize(self, op: str, value: Any) -> ParamValue:
        """Check `value` and return it as an int, or an (h, w) tuple for pairs."""
        if self.pair and isinstance(value, (tuple, list)):
            if len(value) != 2:
                raise ValueError(
                    f"{op}: parameter {self.name!r}={value!r} must be an int or an (h, w) pair"
                )
            return (self._check_int(op, value[0]), self._check_int(op, value[1]))
        number = self._check_int(op, value)
        return (number, number) if self.pair else number

    def describe(self) -> dict[str, Any]:
        """JSON-able description for the CLI and REST listings."""
        return {
            "name": self.name,
            "doc": self.doc,
            "default": self.default,
            "required": self.required,
            "pair": self.pair,
            "minimum": self.minimum,
        }

    def _check_int(self, op: str, value: Any) -> int:
        # bool is an Integral subclass, but True as a size is always a mistake.
        if isinstance(value, bool) or not isinstance(value, Integral):
            raise ValueError(
                f"{op}: parameter {self.name!r} must be an integer, "
                f"got {type(value).__name__} {value!r}"
            )
        if value < self.minimum:
            raise ValueError(
                f"{op}: parameter {self.name!r}={value} must be an integer >= {self.minimum}"
            )
        return int(value)


@dataclass(frozen=True)
class OpSpec:
    """An operator: its parameter table and the functions that define its computation.

    `inputs` gives the main inputs' (name, shape) in kernel argument order; `compute`
    takes the params and those inputs (float64) and returns the float64 output. `macs`
    counts the main op's steps (multiply-adds; a pool's comparisons), each `flops_per_mac`
    flops. `epilogue`: whether the op takes a fused epilogue; `targets`: the target kinds
    it has kernels for.
    """

    name: str
    doc: str
    params: tuple[ParamSpec, ...]
    channel_axis: int  # output axis that epilogue per-channel vectors index
    inputs: Callable[[Params], tuple[tuple[str, Shape], ...]] = field(repr=False)
    output_shape: Callable[[Params], Shape] = field(repr=False)
    macs: Callable[[Params], int] = field(repr=False)
    compute: Callable[..., np.ndarray] = field(repr=False)
    check: Callable[[Params], None] = field(repr=False, default=lambda params: None)
    flops_per_mac: int = 2
    epilogue: bool = True
    targets: tuple[str, ...] = ("llvm", "cuda")

    def param(self, name: str) -> ParamSpec:
        """The parameter called `name`; KeyError if there is none."""
        for spec in self.params:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.params)

    def normalize(self, values: Mapping[str, Any]) -> dict[str, ParamValue]:
        """Validate user values, fill defaults; ordered like the table."""
        names = self.param_names
        for name in values:
            if name not in names:
                raise ValueError(
                    f"{self.name}: unknown parameter {name!r}; expected {', '.join(names)}"
                )
        result: dict[str, ParamValue] = {}
        for spec in self.params:
            if spec.name in values:
                result[spec.name] = spec.normalize(self.name, values[spec.name])
            elif spec.required:
                raise ValueError(f"{self.name}: missing parameter {spec.name!r}")
            else:
                assert spec.default is not None
                result[spec.name] = spec.normalize(self.name, spec.default)
        self.check(result)
        return result

    def describe(self) -> dict[str, Any]:
        """JSON-able description for `autotune ops` and `GET /ops`."""
        return {
            "name": self.name,
            "doc": self.doc,
            "params": [spec.describe() for spec in self.params],
            "epilogue": list(EPILOGUE_STAGES) if self.epilogue else [],
            "dtypes": list(op_dtypes(self.name)),
            "targets": list(self.targets),
        }


def sizes(params: Params, names: Sequence[str]) -> tuple[int, ...]:
    """Integer params by name, for ops to unpack tersely."""
    return tuple(int(params[name]) for name in names)  # type: ignore[arg-type]


def pair(params: Params, name: str) -> tuple[int, int]:
    """A pair param as (h, w)."""
    value = params[name]
    assert isinstance(value, tuple)
    return value
