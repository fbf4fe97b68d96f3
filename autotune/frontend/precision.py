"""Precision in a traced model: the dtype each kernel group computes in (float32, or
float16/bfloat16 from a half model or a `torch.autocast` region), tracing that keeps a
forward's autocast regions in the graph, and folded constants rounded once into a dtype.

A group computes in the dtype of its main node's result, as torch does: a ``model.half()``
conv gives float16, and so does a float32 conv under ``torch.autocast(dtype=float16)``,
whose float32 activations autocast casts first (the group's ``cast``; the kernel module
casts them so too, when autocast is on at the call).
"""
from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import torch
from torch import fx, nn

from autotune.ops import aligned_empty
from autotune.ops.dtypes import to_storage

TORCH_DTYPES: dict[Any, str] = {torch.float32: "float32", torch.float16: "float16",
                                torch.bfloat16: "bfloat16"}
_BY_NAME = {name: dt for dt, name in TORCH_DTYPES.items()}


class PrecisionError(ValueError):
    """A node whose dtypes no autotune kernel computes in."""


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of workload dtype ``name``."""
    return _BY_NAME[name]


def meta_dtype(node: Any) -> Any:
    """The dtype of ``node``'s result as shape propagation saw it (None if not a tensor)."""
    meta = getattr(node, "meta", {}).get("tensor_meta")
    return getattr(meta, "dtype", None)


def group_dtype(node: fx.Node) -> tuple[str, bool]:
    """The workload dtype of the group whose main node is ``node`` (that of its result),
    and whether a float32 activation is cast to it first (autocast); PrecisionError when
    no kernel computes in those dtypes."""
    out = meta_dtype(node)
    name = TORCH_DTYPES.get(out)
    if name is None:
        raise PrecisionError(f"result dtype {out}; autotune kernels compute in "
                             f"{', '.join(TORCH_DTYPES.values())}")
    cast = False
    for arg in node.all_input_nodes:
        dt = meta_dtype(arg)
        if dt is None or dt == out:
            continue
        if dt != torch.float32 or name == "float32":
            raise PrecisionError(f"input dtype {dt} for a {out} result: mixed dtypes")
        cast = True  # autocast's float32 input of a half op
    return name, cast


def stored(t: torch.Tensor, dtype: str) -> np.ndarray:
    """``t`` (a folded constant, float64) rounded once into ``dtype``'s storage, aligned."""
    out = aligned_empty(tuple(t.shape), dtype)
    out[...] = to_storage(t.detach().double().cpu().numpy(), dtype)
    return out


def as_torch(array: np.ndarray, dtype: str) -> torch.Tensor:
    """A CPU tensor of ``dtype`` holding the values of ``array`` (its storage form)."""
    if dtype == "bfloat16":  # bit patterns held as uint16
        return torch.from_numpy(array.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(array.copy())


def autocast_dtype(device_type: str) -> Any:
    """The dtype autocast computes in on ``device_type`` now, None where it is off."""
    if not torch.is_autocast_enabled(device_type):
        return None
    return torch.get_autocast_dtype(device_type)


class _AutocastTracer(fx.Tracer):
    """torch.fx's tracer keeping a forward's autocast regions: entering and leaving
    ``torch.autocast`` become nodes (``torch.amp._enter_autocast`` / ``_exit_autocast``, as
    torch.export records them), where plain symbolic tracing runs the context manager once,
    at trace time, and leaves the graph in float32."""

    def trace(self, root: Any, concrete_args: Any = None) -> fx.Graph:
        tracer = self

        def enter(mode: Any) -> Any:
            args = (mode.device, mode.fast_dtype, mode._enabled, mode._cache_enabled)
            mode._autotune_node = tracer.create_proxy(
                "call_function", torch.amp._enter_autocast, args, {})
            return mode

        def leave(mode: Any, *exc: Any) -> bool:
            tracer.create_proxy("call_function", torch.amp._exit_autocast,
                                (mode._autotune_node,), {})
            return False

        # process-wide while tracing: autocast entered by another thread meanwhile would
        # not take effect (tracing is short and runs no kernels)
        with mock.patch.object(torch.amp.autocast, "__enter__", enter), \
                mock.patch.object(torch.amp.autocast, "__exit__", leave):
            return super().trace(root, concrete_args)


def symbolic_trace(module: nn.Module) -> fx.GraphModule:
    """``torch.fx.symbolic_trace`` of ``module`` with its autocast regions kept."""
    tracer = _AutocastTracer()
    graph = tracer.trace(module)
    return fx.GraphModule(tracer.root, graph, type(module).__name__)
