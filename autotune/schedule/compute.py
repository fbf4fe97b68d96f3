"""Compute definitions: what a kernel computes, independent of how (the schedule).

A ``Tensor`` is either a placeholder (a kernel input) or the result of ``compute``: a value
per point of its shape, optionally a sum over reduction axes, optionally followed by an
elementwise ``post`` applied to the finished sum (the fused epilogue).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from autotune.ir.expr import FLOAT, Expr, Load, Var, const
from autotune.ir.stmt import Buffer


class Tensor:
    """A named array; indexing it (``T[i, j]``) builds a load expression."""

    __slots__ = ("name", "shape", "buffer", "op")

    def __init__(self, name: str, shape: Sequence[int], op: "ComputeOp | None" = None):
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.buffer = Buffer(name, self.shape)
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
    """``out[axes] = post(sum over reduce_axes of body)`` (no sum when reduce_axes is empty).

    ``post`` is an expression in ``acc`` (the finished value) and the axes vars. (A plain
    class, not a dataclass: compiled, its construction is a C call.)
    """

    __slots__ = ("axes", "reduce_axes", "body", "post", "acc")

    def __init__(self, axes: tuple[Var, ...], reduce_axes: tuple[ReduceAxis, ...], body: Expr,
                 post: Expr | None = None, acc: Var | None = None) -> None:
        self.axes, self.reduce_axes, self.body = axes, reduce_axes, body
        self.post, self.acc = post, acc


def placeholder(name: str, shape: Sequence[int]) -> Tensor:
    """A kernel input."""
    return Tensor(name, shape)


def reduce_axis(extent: int, name: str) -> ReduceAxis:
    return ReduceAxis(Var(name), int(extent))


def compute(name: str, shape: Sequence[int], fn: Callable[..., Expr],
            reduce_axes: Sequence[ReduceAxis] = (),
            post: Callable[..., Expr] | None = None,
            axis_names: Sequence[str] | None = None) -> Tensor:
    """Define a tensor by a function of its index vars (and a sum over ``reduce_axes``).

    ``post(acc, *axes)`` maps the finished value to the output (e.g. bias + relu).
    """
    names = list(axis_names) if axis_names else [f"ax{d}" for d in range(len(shape))]
    axes = tuple(Var(n) for n in names)
    body = fn(*axes)
    acc = post_expr = None
    if post is not None:
        acc = Var("acc", FLOAT)
        post_expr = post(acc, *axes)
    op = ComputeOp(axes, tuple(reduce_axes), body, post_expr, acc)
    return Tensor(name, shape, op)
