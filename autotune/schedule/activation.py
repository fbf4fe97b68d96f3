"""Epilogue stages as loop-IR expressions: the affine stages, the residual add and the
activations, written once for every template (the compute definitions' ``post``, the
tensor-core epilogue).

The IR has no transcendental functions, so tanh and erf are rational functions of the
input clamped to where the function is 1 in float32: ``x * P(x^2) / Q(x^2)``, fitted here
by iterated least squares on relative error (max abs error 3.4e-7 for tanh on [-9, 9],
4.0e-7 for erf on [-4, 4], evaluated in float32). sigmoid(x) = (1 + tanh(x / 2)) / 2.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

from autotune.ir.expr import FLOAT, Const, Expr, div, maximum, minimum

ZERO = Const(0.0, FLOAT)
SIX = Const(6.0, FLOAT)

_TANH_CLAMP = 9.0
_TANH_P = (1.0, 0.1338493973016739, 0.0035001069772988558, 2.0678187865996733e-05,
           1.3440518920049271e-08)
_TANH_Q = (1.0, 0.46718260645866394, 0.025894509628415108, 0.0003292798646725714,
           7.81379014824779e-07)
_ERF_CLAMP = 4.0
_ERF_P = (1.1283791065216064, 0.191692516207695, 0.05285519361495972, 0.0038042643573135138,
          0.000282853317912668, 2.0013399080198724e-06)
_ERF_Q = (1.0, 0.5032159686088562, 0.11458303034305573, 0.015047832392156124,
          0.0011665814090520144, 3.748267772607505e-05)


def _f(value: float) -> Expr:
    return Const(value, FLOAT)


def _odd_rational(x: Expr, clamp: float, p: Sequence[float], q: Sequence[float]) -> Expr:
    """``x' * P(x'^2) / Q(x'^2)`` for x' = x clamped to [-clamp, clamp] (Horner form)."""
    x = minimum(maximum(x, _f(-clamp)), _f(clamp))
    t = x * x
    num: Expr = _f(p[-1])
    for c in reversed(p[:-1]):
        num = num * t + _f(c)
    den: Expr = _f(q[-1])
    for c in reversed(q[:-1]):
        den = den * t + _f(c)
    return div(x * num, den)


def tanh(x: Expr) -> Expr:
    return _odd_rational(x, _TANH_CLAMP, _TANH_P, _TANH_Q)


def sigmoid(x: Expr) -> Expr:
    return tanh(x * _f(0.5)) * _f(0.5) + _f(0.5)


def erf(x: Expr) -> Expr:
    return _odd_rational(x, _ERF_CLAMP, _ERF_P, _ERF_Q)


def hardsigmoid(x: Expr) -> Expr:
    """relu6(x + 3) / 6, as torch defines it."""
    return minimum(maximum(x + _f(3.0), ZERO), SIX) * _f(1.0 / 6.0)


ACTIVATIONS: Mapping[str, Callable[[Expr], Expr]] = {
    "relu": lambda x: maximum(x, ZERO),
    "relu6": lambda x: minimum(maximum(x, ZERO), SIX),
    "hardswish": lambda x: x * hardsigmoid(x),
    "hardsigmoid": hardsigmoid,
    "sigmoid": sigmoid,
    "silu": lambda x: x * sigmoid(x),
    "gelu": lambda x: x * _f(0.5) * (erf(x * _f(0.7071067811865476)) + _f(1.0)),
}


def apply_stages(acc: Expr, epilogue: Sequence[str], channel: Expr,
                 vector: Callable[[str, Expr], Expr], residual: Callable[[], Expr]) -> Expr:
    """``acc`` through the workload's epilogue: ``vector(name, channel)`` reads a
    per-channel argument (bias, scale, shift), ``residual()`` the residual where the output
    is written."""
    out = acc
    for stage in epilogue:
        if stage == "bias":
            out = out + vector("bias", channel)
        elif stage == "scale_shift":
            out = out * vector("scale", channel) + vector("shift", channel)
        elif stage == "residual":
            out = out + residual()
        else:
            out = ACTIVATIONS[stage](out)
    return out
