"""Schedules: how each compute stage is looped over.

A ``Stage`` records primitives on named loop axes (split, fuse, reorder, annotate, bind,
compute_at, compute_inline). Extents are resolved only when lowering, because the extent
of a stage computed inside another one's loop is inferred from what that loop reads.
"""
from __future__ import annotations

from typing import Sequence

from autotune.ir.analysis import map_expr, substitute
from autotune.ir.expr import Load, Var, walk
from autotune.ir.stmt import ForKind, Scope, as_kind, as_scope
from autotune.schedule.compute import ComputeOp, Tensor, compute


class Axis:
    """A loop axis of a stage (a root axis or one made by split/fuse). Compared by identity."""

    __slots__ = ("name", "reduce", "mirror")

    def __init__(self, name: str, reduce: bool = False, mirror: "Axis | None" = None):
        self.name, self.reduce, self.mirror = name, reduce, mirror

    def __repr__(self) -> str:
        return self.name


class SplitRel:
    """``parent`` split into ``outer`` x ``inner`` by an inner ``factor`` or outer ``nparts``.
    (Plain classes, not dataclasses: compiled, their construction is a C call.)"""

    __slots__ = ("parent", "outer", "inner", "factor", "nparts")

    def __init__(self, parent: Axis, outer: Axis, inner: Axis, factor: int | None,
                 nparts: int | None) -> None:
        self.parent, self.outer, self.inner = parent, outer, inner
        self.factor, self.nparts = factor, nparts

    def __repr__(self) -> str:
        return f"SplitRel({self.parent} -> {self.outer}, {self.inner})"


class FuseRel:
    """``outer`` and ``inner`` fused into ``fused``."""

    __slots__ = ("outer", "inner", "fused")

    def __init__(self, outer: Axis, inner: Axis, fused: Axis) -> None:
        self.outer, self.inner, self.fused = outer, inner, fused

    def __repr__(self) -> str:
        return f"FuseRel({self.outer}, {self.inner} -> {self.fused})"


class Stage:
    """The loop nest of one tensor. Primitives return new axes; the leaf order is tracked."""

    def __init__(self, tensor: Tensor, scope: Scope = Scope.GLOBAL, op: ComputeOp | None = None):
        """``op`` replaces the tensor's definition in this schedule only (the compute graph
        is shared by every schedule of a workload, so it is never mutated)."""
        op = op if op is not None else tensor.op
        assert op is not None, tensor
        self.tensor = tensor
        self.op: ComputeOp = op
        self.scope = as_scope(scope)
        self.axis: list[Axis] = [Axis(v.name) for v in op.axes]
        self.reduce_axis: list[Axis] = [Axis(r.var.name, reduce=True) for r in op.reduce_axes]
        self.leaves: list[Axis] = [*self.axis, *self.reduce_axis]
        self.relations: list[SplitRel | FuseRel] = []
        self.kinds: dict[Axis, ForKind] = {}
        self.attach: tuple[Stage, Axis] | None = None
        self.inlined = False
        self.per_var_region = False  # region axes mirror the consumer's inner loops

    def __repr__(self) -> str:
        return f"Stage({self.tensor.name})"

    def _check(self, *axes: Axis) -> None:
        for a in axes:
            if a not in self.leaves:
                raise ValueError(f"{self}: {a} is not a leaf axis (leaves: {self.leaves})")

    def split(self, axis: Axis, factor: int | None = None, nparts: int | None = None
              ) -> tuple[Axis, Axis]:
        """Split ``axis`` into (outer, inner) by an inner ``factor`` or an outer ``nparts``."""
        self._check(axis)
        if (factor is None) == (nparts is None):
            raise ValueError("split: give exactly one of factor and nparts")
        if (factor or nparts or 0) < 1:
            raise ValueError(f"split: factor/nparts must be >= 1, got {factor or nparts}")
        outer = Axis(f"{axis.name}.o", axis.reduce)
        inner = Axis(f"{axis.name}.i", axis.reduce)
        self.relations.append(SplitRel(axis, outer, inner, factor, nparts))
        i = self.leaves.index(axis)
        self.leaves[i:i + 1] = [outer, inner]
        return outer, inner

    def tile(self, axis: Axis, factors: Sequence[int]) -> list[Axis]:
        """Split ``axis`` into len(factors) levels; factors[0] (the outer count) is derived."""
        parts: list[Axis] = []
        rest = axis
        for f in reversed(list(factors)[1:]):
            rest, inner = self.split(rest, factor=int(f))
            parts.insert(0, inner)
        parts.insert(0, rest)
        for k, p in enumerate(parts):
            p.name = f"{axis.name}{k}"
        return parts

    def fuse(self, *axes: Axis) -> Axis:
        """Fuse adjacent leaf axes (outer to inner) into one."""
        self._check(*axes)
        pos = [self.leaves.index(a) for a in axes]
        if pos != list(range(pos[0], pos[0] + len(pos))):
            raise ValueError(f"fuse: axes {list(axes)} are not adjacent in {self.leaves}")
        fused = axes[0]
        for a in axes[1:]:
            f = Axis(f"{fused.name}.{a.name}", fused.reduce and a.reduce)
            self.relations.append(FuseRel(fused, a, f))
            i = self.leaves.index(fused)
            self.leaves[i:i + 2] = [f]
            fused = f
        return fused

    def reorder(self, *axes: Axis) -> None:
        """Put the given leaves in this order, in the positions they occupy together."""
        self._check(*axes)
        if len(set(axes)) != len(axes):
            raise ValueError(f"reorder: repeated axis in {list(axes)}")
        slots = sorted(self.leaves.index(a) for a in axes)
        for slot, a in zip(slots, axes):
            self.leaves[slot] = a

    def annotate(self, axis: Axis, kind: ForKind) -> None:
        self._check(axis)
        self.kinds[axis] = as_kind(kind)

    def vectorize(self, axis: Axis) -> None:
        self.annotate(axis, ForKind.VECTORIZED)

    def unroll(self, axis: Axis) -> None:
        self.annotate(axis, ForKind.UNROLLED)

    def parallel(self, axis: Axis) -> None:
        self.annotate(axis, ForKind.PARALLEL)

    def bind(self, axis: Axis, tag: str) -> None:
        """Bind a loop to ``blockIdx.x``, ``threadIdx.y``, ``vthread``, ..."""
        kind = ForKind(tag)
        if kind in (ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED):
            raise ValueError(f"bind: {tag!r} is not a thread tag")
        self.annotate(axis, kind)

    def compute_at(self, parent: "Stage", axis: Axis) -> None:
        """Compute this stage inside ``parent``'s loop ``axis``, over just the region it reads.

        A cache-write stage's spatial axes then mirror the parent's loops below ``axis``, so
        that strided (vthread) patterns still give a dense register tile.
        """
        parent._check(axis)
        if self.relations:
            raise ValueError(f"{self}: compute_at must come before split/fuse")
        self.attach = (parent, axis)
        if self.per_var_region:
            below = parent.leaves[parent.leaves.index(axis) + 1:]
            self.axis = [Axis(a.name, mirror=a) for a in below if not a.reduce]
            self.leaves = [*self.axis, *self.reduce_axis]

    def compute_inline(self) -> None:
        """Substitute this (elementwise) stage into its consumers instead of storing it."""
        if self.op.reduce_axes:
            raise ValueError(f"{self}: cannot inline a reduction")
        self.inlined = True


class Schedule:
    """The stages of a kernel computing ``output``, producers first."""

    def __init__(self, output: Tensor, inputs: Sequence[Tensor], temps: Sequence[Tensor] = (),
                 order: Sequence[Tensor] | None = None):
        """``inputs`` are the kernel's placeholders in argument order; ``temps`` the other
        computed tensors the output depends on (e.g. a padded input, a packed weight);
        ``order``, when known, is ``topo_order(output, temps)``."""
        self.output = output
        self.inputs = list(inputs)
        self.stages: list[Stage] = []
        self._by_tensor: dict[Tensor, Stage] = {}
        for t in order if order is not None else topo_order(output, temps):
            self._add(Stage(t), len(self.stages))

    def _add(self, st: Stage, pos: int) -> Stage:
        self.stages.insert(pos, st)
        self._by_tensor[st.tensor] = st
        return st

    def __getitem__(self, t: Tensor) -> Stage:
        return self._by_tensor[t]

    def cache_write(self, t: Tensor, scope: str | Scope) -> Stage:
        """Compute ``t``'s reduction into a ``scope`` buffer (float32, whatever ``t``'s
        dtype: a half output is accumulated in float32 and rounded once, in the write-back);
        ``t`` becomes the write-back (where the fused epilogue runs). Returns the new
        stage."""
        st = self[t]
        if st.relations or st.kinds:
            raise ValueError(f"cache_write({t.name}) must come before scheduling {t.name}")
        op = st.op
        scope = as_scope(scope)
        local = Tensor(f"{t.name}_{scope.value}", t.shape,
                       ComputeOp(op.axes, op.reduce_axes, op.body, combiner=op.combiner))
        read = local[tuple(op.axes)]
        body = read if op.post is None else _subst_acc(op.post, op.acc, read)
        pos = self.stages.index(st)
        # no reduction axes now
        self.stages[pos] = self._by_tensor[t] = Stage(t, st.scope, ComputeOp(op.axes, (), body))
        new = Stage(local, scope)
        new.per_var_region = True
        return self._add(new, pos)

    def cache_read(self, t: Tensor, scope: str | Scope, readers: Sequence[Stage]) -> Stage:
        """Copy the region of ``t`` that ``readers`` use into a ``scope`` buffer."""
        scope = as_scope(scope)
        # float32 whatever t's dtype: a half input is widened once, as it is copied
        cached = compute(f"{t.name}_{scope.value}", t.shape, lambda *ax: t[ax])
        for r in readers:
            op = r.op
            r.op = ComputeOp(op.axes, op.reduce_axes, _replace_loads(op.body, t, cached), op.post,
                             op.acc, op.combiner)
        new = Stage(cached, scope)
        pos = min(self.stages.index(r) for r in readers)
        return self._add(new, pos)


def _subst_acc(post, acc: Var | None, value):
    return substitute(post, {acc: value}) if acc is not None else post


def _replace_loads(e, old: Tensor, new: Tensor):
    return map_expr(e, lambda x: Load(new.buffer, x.indices)
                    if isinstance(x, Load) and x.buffer is old.buffer else None)


def topo_order(output: Tensor, temps: Sequence[Tensor]) -> list[Tensor]:
    """Computed tensors reachable from ``output``, producers before consumers (depth first,
    producers in the order their loads occur). Iterative: a recursive inner function is a
    reference cycle, which kept the whole graph alive until the cyclic collector ran."""
    by_buffer = {id(t.buffer): t for t in [*temps, output]}
    order: list[Tensor] = []
    seen = {id(output)}
    stack = [(output, iter(_producers(output, by_buffer)))]
    while stack:
        t, pending = stack[-1]
        nxt = next((p for p in pending if id(p) not in seen), None)
        if nxt is None:
            stack.pop()
            order.append(t)
        else:
            seen.add(id(nxt))
            stack.append((nxt, iter(_producers(nxt, by_buffer))))
    return order


def _producers(t: Tensor, by_buffer: dict[int, Tensor]) -> list[Tensor]:
    """The computed tensors ``t``'s definition loads, in load order (repeats included)."""
    assert t.op is not None
    exprs = [t.op.body] + ([t.op.post] if t.op.post is not None else [])
    return [by_buffer[id(x.buffer)] for e in exprs for x in walk(e)
            if isinstance(x, Load) and id(x.buffer) in by_buffer]
