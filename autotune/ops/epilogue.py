"""Fused epilogues: stages applied to an operator's result as it is written.

Valid chains are at most one of `bias` / `scale_shift` (per-output-channel vectors), then
optionally `residual` (adds a second tensor of the output's shape: a ResNet or MobileNet-V2
shortcut), then optionally one activation (`ACTIVATIONS`): `relu`, `relu6` (min(max(x, 0),
6), MobileNet-V2's), `hardswish` and `hardsigmoid` (MobileNet-V3's, as torch defines them),
`sigmoid`, `silu` (x * sigmoid(x)) or `gelu` (the exact one, with erf). The canonical order
is that one: affine, residual add, activation, so `relu(conv(x) * scale + shift +
identity)` is ResNet's block and dropping `relu` gives MobileNet-V2's.
"""
from __future__ import annotations

import math
from types import MappingProxyType
from typing import Mapping, Sequence, Union

import numpy as np

ACTIVATIONS: tuple[str, ...] = ("relu", "relu6", "hardswish", "hardsigmoid", "sigmoid", "silu",
                                "gelu")
EPILOGUE_STAGES: tuple[str, ...] = ("bias", "scale_shift", "residual", *ACTIVATIONS)

# Kernel arguments each stage adds, in argument order: per-channel vectors of shape
# (channels,), except those in FULL_ARGS, which have the output's shape.
STAGE_ARGS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {"bias": ("bias",), "scale_shift": ("scale", "shift"), "residual": ("residual",),
     **{act: () for act in ACTIVATIONS}}
)
FULL_ARGS: frozenset[str] = frozenset({"residual"})

# Flops per output element: an add, a multiply-add (counted as 2), an add, a max, a max
# and a min; the others as the kernels compute them (tanh and erf as rational functions:
# `autotune.schedule.activation`).
STAGE_FLOPS: Mapping[str, int] = MappingProxyType(
    {"bias": 1, "scale_shift": 2, "residual": 1, "relu": 1, "relu6": 2, "hardswish": 5,
     "hardsigmoid": 4, "sigmoid": 24, "silu": 25, "gelu": 29})

_AFFINE = ("bias", "scale_shift")
_erf = np.vectorize(math.erf, otypes=[np.float64])


def canonical_epilogue(op: str, stages: Union[str, Sequence[str]]) -> tuple[str, ...]:
    """Validate an epilogue chain given in any order and return it canonically ordered."""
    chain = (stages,) if isinstance(stages, str) else tuple(stages)
    for stage in chain:
        if not isinstance(stage, str) or stage not in EPILOGUE_STAGES:
            raise ValueError(
                f"{op}: unknown epilogue stage {stage!r}; expected {', '.join(EPILOGUE_STAGES)}"
            )
    if len(set(chain)) != len(chain):
        raise ValueError(f"{op}: epilogue {list(chain)} repeats a stage")
    if all(stage in chain for stage in _AFFINE):
        raise ValueError(f"{op}: epilogue may hold only one of bias and scale_shift, got both")
    acts = [stage for stage in chain if stage in ACTIVATIONS]
    if len(acts) > 1:
        raise ValueError(f"{op}: epilogue may hold only one activation "
                         f"({', '.join(ACTIVATIONS)}), got {' and '.join(acts)}")
    return tuple(stage for stage in EPILOGUE_STAGES if stage in chain)


def epilogue_args(epilogue: Sequence[str]) -> tuple[str, ...]:
    """Names of the arrays the chain needs (per-channel vectors, the residual), in kernel
    argument order."""
    return tuple(name for stage in epilogue for name in STAGE_ARGS[stage])


def epilogue_arg_shape(name: str, channels: int, output_shape: tuple[int, ...]
                       ) -> tuple[int, ...]:
    """The shape of epilogue argument ``name``: the output's, or (channels,)."""
    return tuple(output_shape) if name in FULL_ARGS else (channels,)


def epilogue_flops(epilogue: Sequence[str]) -> int:
    """Flops the chain adds per output element."""
    return sum(STAGE_FLOPS[stage] for stage in epilogue)


def apply_epilogue(
    out: np.ndarray,
    epilogue: Sequence[str],
    vectors: Mapping[str, np.ndarray],
    channel_axis: int,
) -> np.ndarray:
    """Apply the chain to `out` (a new array is returned); vectors are indexed by channel,
    the residual has `out`'s shape."""
    axis = channel_axis % out.ndim
    # Reshape (channels,) so it broadcasts along `axis` of the output.
    view = [1] * out.ndim
    view[axis] = out.shape[axis]

    def per_channel(name: str) -> np.ndarray:
        return np.asarray(vectors[name], dtype=np.float64).reshape(view)

    result = np.array(out, dtype=np.float64)
    for stage in epilogue:
        if stage == "bias":
            result += per_channel("bias")
        elif stage == "scale_shift":
            result = result * per_channel("scale") + per_channel("shift")
        elif stage == "residual":
            result += np.asarray(vectors["residual"], dtype=np.float64)
        elif stage == "relu":
            np.maximum(result, 0.0, out=result)
        elif stage == "relu6":
            np.clip(result, 0.0, 6.0, out=result)
        elif stage in ("hardswish", "hardsigmoid"):
            gate = np.clip(result + 3.0, 0.0, 6.0) / 6.0
            result = result * gate if stage == "hardswish" else gate
        elif stage in ("sigmoid", "silu"):
            gate = 1.0 / (1.0 + np.exp(-np.clip(result, -700.0, 700.0)))
            result = result * gate if stage == "silu" else gate
        elif stage == "gelu":
            result = 0.5 * result * (1.0 + _erf(result / math.sqrt(2.0)))
    return result
