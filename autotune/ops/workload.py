"""`Workload`: an operator with concrete sizes, epilogue and dtype; the database key."""
from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType
from typing import Any, Iterator, Mapping, Sequence, Union

import numpy as np

from autotune.ops.dtypes import (
    DTYPES,
    dtype_info,
    op_refusal,
    storage_nan,
    target_refusal,
    to_float32,
    to_storage,
)
from autotune.ops.epilogue import (
    apply_epilogue,
    canonical_epilogue,
    epilogue_arg_shape,
    epilogue_args,
    epilogue_flops,
)
from autotune.ops.layout import (
    NCHW,
    from_layout,
    layout_block,
    layout_blocks,
    layout_refusal,
    layout_shape,
    to_layout,
)
from autotune.ops.registry import op_spec
from autotune.ops.spec import OpSpec, ParamError, ParamValue, Shape

__all__ = ["DTYPES", "ArgSpec", "Workload", "WorkloadError", "aligned_empty", "workload"]

_ALIGN = 64  # bytes; a cache line, and the widest vector load (AVX-512)
_WIRE_KEYS = ("op", "params", "epilogue", "dtype", "prepacked", "layout")
# Ops whose second input a model holds constant (a conv's weight, a linear layer's matrix):
# their prepacked form reads it packed by a separate kernel (`autotune.schedule.prepack`).
PREPACKABLE_OPS: frozenset[str] = frozenset({"conv2d", "group_conv2d", "matmul"})
# ... and those whose blocked layouts do (a depthwise conv's NCHW kernels read the weight as
# given: the prepacked form would be the same kernel under a second key)
BLOCKED_PREPACKABLE_OPS: frozenset[str] = frozenset({"depthwise_conv2d"})


def prepackable(op: str, layout: str = "NCHW") -> bool:
    """Whether ``op`` in ``layout`` has a prepacked form."""
    return op in PREPACKABLE_OPS or (op in BLOCKED_PREPACKABLE_OPS
                                     and layout_block(layout) > 1)


class WorkloadError(ValueError):
    """A bad wire-form workload; ``loc`` is the path to the field at fault (``("params",
    "M")``, ``("op",)``; empty for the workload as a whole), ``field`` the same dotted."""

    def __init__(self, message: str, loc: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.loc = loc

    @property
    def field(self) -> str:
        return ".".join(self.loc)


@contextmanager
def _blame(*loc: str) -> Iterator[None]:
    """Re-raise a ValueError inside as a `WorkloadError` at ``loc`` (at the parameter a
    `ParamError` names, below ``loc``)."""
    try:
        yield
    except WorkloadError:
        raise
    except ValueError as err:
        param = (err.param,) if isinstance(err, ParamError) else ()
        raise WorkloadError(str(err), (*loc, *param)) from None


def _check_dtype(op: str, dtype: str) -> None:
    reason = op_refusal(op, dtype)
    if reason:
        raise WorkloadError(reason, ("dtype",))


def _check_params(spec: OpSpec, params: Mapping[str, Any]) -> None:
    """Each parameter alone (so that an error names the one at fault), then the missing."""
    op, table = spec.name, {param.name: param for param in spec.params}
    for name, value in params.items():
        with _blame("params", str(name)):
            if name not in table:
                raise ValueError(f"{op}: unknown parameter {name!r}; expected {', '.join(table)}")
            table[name].normalize(op, value)
    for name, param in table.items():
        if param.required and name not in params:
            raise WorkloadError(f"{op}: missing parameter {name!r}", ("params", name))


def _check_epilogue(spec: OpSpec, chain: tuple[str, ...]) -> None:
    if chain and not spec.epilogue:
        raise WorkloadError(f"{spec.name}: takes no epilogue, got {list(chain)}", ("epilogue",))


def _check_prepacked(op: str, prepacked: object, layout: object) -> None:
    if not isinstance(prepacked, bool):
        raise ValueError(f"workload: field 'prepacked' must be a boolean, got {prepacked!r}")
    if prepacked and op in BLOCKED_PREPACKABLE_OPS and isinstance(layout, str):
        if not prepackable(op, layout):
            raise ValueError(f"{op}: has a prepacked form in a blocked layout only "
                             f"(NCHW<x>c), not {layout}")
    elif prepacked and op not in PREPACKABLE_OPS:
        raise ValueError(f"{op}: has no constant operand to prepack; only "
                         f"{', '.join(sorted(PREPACKABLE_OPS | BLOCKED_PREPACKABLE_OPS))} "
                         f"have a prepacked form (depthwise_conv2d in a blocked layout)")


@dataclass(frozen=True)
class ArgSpec:
    """One kernel argument: its name, shape and whether the kernel reads or writes it."""

    name: str
    shape: Shape
    role: str  # "input" | "output"
    dtype: str = "float32"


@dataclass(frozen=True)
class Workload:
    """An operator instance. Construct with `workload(...)`; every instance is validated.

    `param_items` holds the params in table order, defaults filled, pairs as (h, w).
    ``prepacked``: the form whose constant operand is packed beforehand, once, as a compiled
    model runs it; its own database key (only ops in `PREPACKABLE_OPS`). ``layout``: the data
    and output of a conv or pool op in NCHW or channel-blocked NCHW[x]c, a conv2d's in two
    of those (``IN>OUT``) or NHWC (`autotune.ops.layout`); its own key.
    """

    op: str
    param_items: tuple[tuple[str, ParamValue], ...]
    epilogue: tuple[str, ...] = ()
    dtype: str = "float32"
    prepacked: bool = False
    layout: str = NCHW

    def __post_init__(self) -> None:
        spec = op_spec(self.op)
        _check_dtype(self.op, self.dtype)
        items = self.param_items
        values = dict(items.items() if isinstance(items, Mapping) else items)
        if len(values) != len(items):
            raise ValueError(f"{self.op}: a parameter is given twice in {items!r}")
        normalized = spec.normalize(values)
        _check_layout(self.op, self.layout, normalized)
        _check_prepacked(self.op, self.prepacked, self.layout)
        object.__setattr__(self, "param_items", tuple(normalized.items()))
        object.__setattr__(self, "epilogue", canonical_epilogue(self.op, self.epilogue))
        _check_epilogue(spec, self.epilogue)

    # ---- description -------------------------------------------------------------

    @property
    def spec(self) -> OpSpec:
        return op_spec(self.op)

    @property
    def params(self) -> Mapping[str, ParamValue]:
        """Read-only name -> int or (h, w) mapping."""
        return MappingProxyType(dict(self.param_items))

    def dim(self, name: str) -> int:
        """The integer parameter ``name`` (a size such as ``M`` or ``C``)."""
        value = dict(self.param_items)[name]
        if not isinstance(value, int):
            raise TypeError(f"{self.op}: parameter {name!r} is a pair, not a size")
        return value

    def pair(self, name: str) -> tuple[int, int]:
        """The (h, w) parameter ``name`` (``stride``, ``pad``, ``dilation``)."""
        value = dict(self.param_items)[name]
        if not isinstance(value, tuple):
            raise TypeError(f"{self.op}: parameter {name!r} is a size, not a pair")
        return value

    @cached_property
    def output_shape(self) -> Shape:
        """The output argument's shape, in the workload's layout."""
        return layout_shape("out", self.spec.output_shape(self.params), self.layout)

    @property
    def block(self) -> int:
        """Channels per block of the output's layout (1 for NCHW)."""
        return layout_block(self.layout)

    @property
    def in_block(self) -> int:
        """Channels per block of the data's layout (1 for NCHW)."""
        return layout_blocks(self.layout)[0]

    @property
    def channels(self) -> int:
        """Length of the per-channel epilogue vectors."""
        return self.spec.output_shape(self.params)[self.spec.channel_axis]

    @property
    def out_h(self) -> int:
        """Output height (conv and pool ops only)."""
        return self._conv_out_axis(2)

    @property
    def out_w(self) -> int:
        """Output width (conv and pool ops only)."""
        return self._conv_out_axis(3)

    def _conv_out_axis(self, axis: int) -> int:
        if self.op not in ("conv2d", "group_conv2d", "depthwise_conv2d", "max_pool2d",
                           "avg_pool2d"):
            raise AttributeError(f"{self.op} has no spatial output axes")
        return self.spec.output_shape(self.params)[axis]  # NCHW, whatever the layout

    def check_target(self, target: Any) -> None:
        """Raise a `WorkloadError` when ``target`` (an `autotune.target.Target`: its ``kind``
        and ``arch``) cannot run this workload: at ``op`` for an op without kernels for its
        kind (max_pool2d on cuda), at ``dtype`` for half dtypes on a CPU, bfloat16 below
        sm_80."""
        if target.kind not in self.spec.targets:
            raise WorkloadError(f"{self}: {self.op} has kernels for "
                                f"{', '.join(self.spec.targets)} targets only, not "
                                f"{target.kind}", ("op",))
        reason = target_refusal(self.dtype, target.kind, getattr(target, "arch", ""))
        if reason:
            raise WorkloadError(f"{self}: {reason}", ("dtype",))

    @cached_property
    def arg_specs(self) -> tuple[ArgSpec, ...]:
        """Kernel arguments in order: main inputs, epilogue arrays (per-channel vectors, a
        residual of the output's shape), then `out`."""
        params = self.params
        # every argument is in the workload's dtype (epilogue vectors and residual too)
        dt = self.dtype
        main = [ArgSpec(name, layout_shape(name, shape, self.layout), "input", dt)
                for name, shape in self.spec.inputs(params)]
        extra = [ArgSpec(name, epilogue_arg_shape(name, self.channels, self.output_shape),
                         "input", dt) for name in epilogue_args(self.epilogue)]
        return (*main, *extra, ArgSpec("out", self.output_shape, "output", dt))

    def flops(self) -> int:
        """2 per multiply-accumulate of the main op (padding taps included; 1 per
        comparison of a pool), plus the epilogue's per-output-element flops: bias 1,
        scale_shift 2, residual 1, relu 1, relu6 2."""
        outputs = int(np.prod(self.output_shape))
        return (self.spec.flops_per_mac * self.spec.macs(self.params)
                + outputs * epilogue_flops(self.epilogue))

    def __str__(self) -> str:
        def show(value: ParamValue) -> str:
            return f"({value[0]},{value[1]})" if isinstance(value, tuple) else str(value)

        return self._label([f"{name}={show(value)}" for name, value in self._keyed_items()])

    def _keyed_items(self) -> tuple[tuple[str, ParamValue], ...]:
        """`param_items` less those at a default that stays out of the key."""
        keyless = {p.name: p.default for p in self.spec.params if p.keyless_default}
        return tuple((name, value) for name, value in self.param_items
                     if name not in keyless or keyless[name] != value)

    def brief(self) -> str:
        """`str` without the parameters at their defaults, and a pair of equal values as
        one (``stride=2``): the dashboard's label (the full form on hover)."""
        defaults = {p.name: p.default for p in self.spec.params if p.default is not None}
        shown = []
        for name, value in self.param_items:
            one = value[0] if isinstance(value, tuple) and value[0] == value[1] else value
            if defaults.get(name) != one:
                shown.append(f"{name}=({one[0]},{one[1]})" if isinstance(one, tuple)
                             else f"{name}={one}")
        return self._label(shown)

    def _label(self, params: Sequence[str]) -> str:
        # float32 goes unnamed, so that labels and logs from before dtypes read the same
        dtype = "" if self.dtype == "float32" else f":{self.dtype}"
        return (f"{self.op}({','.join(params)})" + "".join(f"+{stage}" for stage in self.epilogue)
                + dtype + (" prepacked" if self.prepacked else "")
                + (f" {self.layout}" if self.layout != NCHW else ""))

    # ---- serialisation -------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Wire form: pairs become lists; ``prepacked`` only when set and ``layout`` only
        when blocked (so the key of the usual form is what it always was)."""
        params = {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in self._keyed_items()
        }
        return {
            "op": self.op,
            "params": params,
            "epilogue": list(self.epilogue),
            "dtype": self.dtype,
            **({"prepacked": True} if self.prepacked else {}),
            **({"layout": self.layout} if self.layout != NCHW else {}),
        }

    def to_json(self) -> str:
        """Canonical JSON: sorted keys, no spaces."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @cached_property
    def key(self) -> str:
        """The database key (the canonical JSON)."""
        return self.to_json()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workload:
        """Parse and re-validate the wire form; `epilogue`, `dtype`, `prepacked` and
        `layout` are optional.

        Raises `WorkloadError` naming the field at fault.
        """
        if not isinstance(data, Mapping):
            raise WorkloadError(f"workload: expected an object, got {type(data).__name__}")
        for name in data:
            if name not in _WIRE_KEYS:
                raise WorkloadError(
                    f"workload: unknown field {name!r}; expected {', '.join(_WIRE_KEYS)}",
                    (str(name),))
        if "op" not in data:
            raise WorkloadError("workload: missing field 'op'", ("op",))
        op, params = data["op"], data.get("params", {})
        with _blame("op"):
            if not isinstance(op, str):
                raise ValueError(f"workload: field 'op' must be a string, got {op!r}")
            spec = op_spec(op)
        if not isinstance(params, Mapping):
            raise WorkloadError(f"workload: field 'params' must be an object, got {params!r}",
                                ("params",))
        _check_params(spec, params)
        epilogue = data.get("epilogue") or ()
        with _blame("epilogue"):
            if not isinstance(epilogue, (str, list, tuple)):
                raise ValueError(f"workload: field 'epilogue' must be a list, got {epilogue!r}")
            chain = canonical_epilogue(op, epilogue)
        _check_epilogue(spec, chain)
        dtype = data.get("dtype", "float32")
        with _blame("dtype"):
            _check_dtype(op, dtype)
        layout = data.get("layout", NCHW)
        with _blame("layout"):
            layout_block(layout)
        prepacked = data.get("prepacked", False)
        with _blame("prepacked"):
            _check_prepacked(op, prepacked, layout)
        with _blame("params"):  # what is left: checks across parameters
            return cls(op, tuple(params.items()), chain, dtype, prepacked, layout)

    @classmethod
    def from_json(cls, text: Union[str, Mapping[str, Any]]) -> Workload:
        """Parse a JSON string (or an already decoded dict)."""
        if isinstance(text, Mapping):
            return cls.from_dict(text)
        try:
            data = json.loads(text)
        except (TypeError, json.JSONDecodeError) as err:
            raise WorkloadError(f"workload: not valid JSON: {err}") from None
        return cls.from_dict(data)

    # ---- data ------------------------------------------------------------------------

    def random_args(self, seed: int) -> list[np.ndarray]:
        """Aligned arrays in argument order, in the dtype's storage form
        (`autotune.ops.dtypes`): inputs uniform in [-1, 1) rounded to the dtype (so within
        [-1, 1]), without
        zeros; the output filled with NaN so unwritten elements show."""
        rng = np.random.default_rng(seed)
        name = self.dtype
        args = []
        for arg in self.arg_specs:
            array = aligned_empty(arg.shape, name)
            if arg.role == "output":
                array.fill(storage_nan(name))
                args.append(array)
                continue
            values = rng.random(arg.shape, dtype=np.float32)
            values *= 2
            values -= 1
            stored = to_storage(values, name)
            # zero inputs hide indexing bugs; checked after rounding (tiny values flush)
            stored[to_float32(stored, name) == 0] = to_storage(np.array([0.5], np.float32), name)
            np.copyto(array, stored)
            args.append(array)
        return args

    def reference(self, args: Sequence[np.ndarray]) -> np.ndarray:
        """Expected output (float32) from numpy, given the inputs (and optionally `out`,
        which is ignored) in argument order, in the dtype's storage form. Computed in
        float64 from the inputs' exact values (a half output is not rounded: the dtype's
        tolerance covers that)."""
        specs = self.arg_specs
        inputs = specs[:-1]
        if len(args) not in (len(inputs), len(specs)):
            raise ValueError(
                f"{self.op}: reference takes {len(inputs)} inputs "
                f"({', '.join(a.name for a in inputs)}), got {len(args)} arrays"
            )
        storage = np.dtype(dtype_info(self.dtype).storage)
        arrays: dict[str, np.ndarray] = {}
        for spec, array in zip(inputs, args):
            if tuple(np.shape(array)) != spec.shape:
                raise ValueError(
                    f"{self.op}: argument {spec.name!r} has shape {np.shape(array)}, "
                    f"expected {spec.shape}"
                )
            if self.dtype != "float32" and np.asarray(array).dtype != storage:
                raise ValueError(
                    f"{self.op}: argument {spec.name!r} is {np.asarray(array).dtype}; a "
                    f"{self.dtype} workload takes its storage form ({storage}: see "
                    f"autotune.ops.dtypes.to_storage)"
                )
            exact = to_float32(np.asarray(array), self.dtype) if self.dtype != "float32" \
                else array
            arrays[spec.name] = np.asarray(exact, dtype=np.float64)
        if self.layout != NCHW:  # computed in NCHW, then put in the layout
            arrays = {name: from_layout(a, name, self.layout) for name, a in arrays.items()}
        main = [arrays[name] for name, _ in self.spec.inputs(self.params)]
        out = self.spec.compute(self.params, *main)
        out = apply_epilogue(out, self.epilogue, arrays, self.spec.channel_axis)
        return to_layout(np.ascontiguousarray(out, dtype=np.float32), "out", self.layout)


def aligned_empty(shape: Shape, dtype: str = "float32", align: int = _ALIGN) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an `align`-byte boundary;
    ``dtype`` is a workload dtype (held in its storage form: bfloat16 as uint16) or any
    numpy dtype."""
    dtype = dtype_info(dtype).storage if dtype in DTYPES else dtype
    itemsize = np.dtype(dtype).itemsize
    nbytes = int(np.prod(shape)) * itemsize
    buffer: np.ndarray = np.empty(nbytes + align, dtype=np.uint8)
    offset = -buffer.ctypes.data % align
    return buffer[offset : offset + nbytes].view(dtype).reshape(shape)


def _check_layout(op: str, layout: str, params: Mapping[str, Any]) -> None:
    with _blame("layout"):
        refusal = layout_refusal(op, layout, params)
    if refusal is not None:
        name, reason = refusal
        raise WorkloadError(reason, ("params", name) if name else ("layout",))


def workload(
    op: str, *, epilogue: Union[str, Sequence[str]] = (), dtype: str = "float32",
    prepacked: bool = False, layout: str = NCHW, **params: Any
) -> Workload:
    """Build a validated `Workload`, e.g. `workload("matmul", M=64, N=64, K=64)`."""
    chain = (epilogue,) if isinstance(epilogue, str) else tuple(epilogue or ())
    return Workload(op, tuple(params.items()), chain, dtype, prepacked, layout)
