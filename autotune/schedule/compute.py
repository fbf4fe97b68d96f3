"""Compute definitions: what a kernel computes, independent of how (the schedule).

A ``Tensor`` is either a placeholder (a kernel input) or the result of ``compute``: a value
per point of its shape, optionally a sum (or a max: ``combiner``) over reduction axes,
optionally followed by an elementwise ``post`` applied to the finished value (the fused
epilogue).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from autotune.ir.expr import FLOAT, Const, Expr, Load, Var, const, maximum
from autotune.ir.stmt import Buffer

# How a reduction folds its values: (identity, combine(accumulator, value)).
COMBINERS: dict[str, tuple[Const, Callable[[Expr, Expr], Expr]]] = {
    "sum": (Const(0.0, FLOAT), lambda acc, value: acc + value),
    "max": (Const(float("-inf"), FLOAT), maximum),
}


class Tensor:
    """A named array of element type ``dtype`` (a workload dtype: a float16 tensor is
    computed in float32 and rounded when stored); indexing it (``T[i, j]``) builds a load
    expression."""

    __slots__ = ("name", "shape", "buffer", "op", "dtype")

    def __init__(self, name: str, shape: Sequence[int], op: "ComputeOp | None" = None,
                 dtype: str = FLOAT):
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.buffer = Buffer(name, self.shape, dtype)
        self.op = op

    def __getitem__(self, idx) -> Expr:
        if not isinstance(idx, tuple):
            idx = (idx,)
        return Load(self.buffer, tuple(const(i) for i in idx))

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {self.shape})"


@dataclass(frozen=True, eq=False)
class ReduceAxis:
    var: Var
    extent: int


class ComputeOp:
    """``out[axes] = post(combiner over reduce_axes of body)`` (no reduction when
    reduce_axes is empty); ``combiner`` names a `COMBINERS` entry: "sum" or "max".

    ``post`` is an expression in ``acc`` (the finished value) and the axes vars. (A plain
    class, not a dataclass: compiled, its construction is a C call.)
    """

    __slots__ = ("axes", "reduce_axes", "body", "post", "acc", "combiner")

    def __init__(self, axes: tuple[Var, ...], reduce_axes: tuple[ReduceAxis, ...], body: Expr,
                 post: Expr | None = None, acc: Var | None = None,
                 combiner: str = "sum") -> None:
        self.axes, self.reduce_axes, self.body = axes, reduce_axes, body
        self.post, self.acc, self.combiner = post, acc, combiner


def placeholder(name: str, shape: Sequence[int], dtype: str = FLOAT) -> Tensor:
    """A kernel input."""
    return Tensor(name, shape, dtype=dtype)


def reduce_axis(extent: int, name: str) -> ReduceAxis:
    return ReduceAxis(Var(name), int(extent))


def compute(name: str, shape: Sequence[int], fn: Callable[..., Expr],
            reduce_axes: Sequence[ReduceAxis] = (),
            post: Callable[..., Expr] | None = None,
            axis_names: Sequence[str] | None = None, combiner: str = "sum",
            dtype: str = FLOAT) -> Tensor:
    """Define a tensor of ``dtype`` by a function of its index vars (and a sum over
    ``reduce_axes``, or a max with ``combiner="max"``).

    ``post(acc, *axes)`` maps the finished value to the output (e.g. bias + relu).
    """
    if combiner not in COMBINERS:
        raise ValueError(f"compute: unknown combiner {combiner!r}; expected "
                         f"{', '.join(COMBINERS)}")
    names = list(axis_names) if axis_names else [f"ax{d}" for d in range(len(shape))]
    axes = tuple(Var(n) for n in names)
    body = fn(*axes)
    acc = post_expr = None
    if post is not None:
        acc = Var("acc", FLOAT)
        post_expr = post(acc, *axes)
    op = ComputeOp(axes, tuple(reduce_axes), body, post_expr, acc, combiner)
    return Tensor(name, shape, op, dtype)
