"""Lowering: a ``Schedule`` becomes a loop AST (``PrimFunc``).

Each stage's leaf axes become nested loops. A stage attached with ``compute_at`` is emitted
inside its consumer's loop, over the region that the loop's body reads, found by affine
analysis of the already-built body (a box for caches of inputs; for cache-write stages one
buffer dimension per consumer loop, which keeps strided vthread tiles dense). Loops whose
split does not divide the extent get guards, placed as far out as their variables allow.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from math import ceil

from autotune.ir.analysis import (
    affine,
    affine_range,
    from_affine,
    index_range,
    loads_of,
    loop_extents,
    map_expr,
    map_stmt_exprs,
    simplify,
    substitute,
)
from autotune.ir.expr import Cmp, Const, Expr, Load, Select, Var, add, cmp, mul, walk
from autotune.ir.stmt import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Scope,
    Seq,
    Stmt,
    Store,
    Sync,
)
from autotune.ir.visitor import StmtMutator
from autotune.schedule.compute import COMBINERS
from autotune.schedule.schedule import Axis, Schedule, SplitRel, Stage

# loops whose iterations a block's threads split among themselves
_BLOCK_SHARED = frozenset({ForKind.THREAD_X, ForKind.THREAD_Y, ForKind.THREAD_Z, ForKind.VTHREAD})


class LoweringError(ValueError):
    """The schedule cannot be lowered (an invalid config for this workload)."""


@dataclass
class _Region:
    """Where an attached stage's axes sit in its tensor: per dimension a base expression and
    either an extent (box) or a list of (stage axis, coefficient) terms (per-var)."""

    bases: list[Expr]
    extents: list[int] = field(default_factory=list)
    terms: list[list[tuple[Axis, int]]] = field(default_factory=list)
    axis_extent: dict[Axis, int] = field(default_factory=dict)
    consumer_vars: dict[Axis, Var] = field(default_factory=dict)


def lower_schedule(sch: Schedule, name: str = "kernel") -> PrimFunc:
    return _Lowerer(sch).run(name)


class _Lowerer:
    def __init__(self, sch: Schedule):
        self.sch = sch
        self.ext: dict[Var, int] = {}
        # simplify's results: vars are never re-bound to another extent, so they stay valid
        self.memo: dict[Expr, Expr] = {}
        self.axis_of_var: dict[Var, Axis] = {}
        self.names: dict[str, int] = {}
        self.workspaces: list[Buffer] = []
        self.attached: dict[tuple[int, Axis], list[Stage]] = {}
        for st in sch.stages:
            if st.attach is not None:
                self.attached.setdefault((id(st.attach[0]), st.attach[1]), []).append(st)
        self.bodies = self._inline()

    def run(self, name: str) -> PrimFunc:
        parts = []
        for st in self.sch.stages:
            if st.inlined or st.attach is not None:
                continue
            stmt, buf = self.emit(st, [], None)
            if st.tensor is not self.sch.output:
                self.workspaces.append(buf)
            parts.append(stmt)
        body = _Simplifier(self._simplify_expr).visit(Seq(parts))
        args = tuple(t.buffer for t in self.sch.inputs) + (self.sch.output.buffer,)
        return PrimFunc(name, args, body, tuple(self.workspaces))

    def _simplify_expr(self, e: Expr) -> Expr:
        """``simplify`` over this lowering's loops, memoised across the lowering."""
        return simplify(e, self.ext, self.memo)

    # ------------------------------------------------------------------ inlining
    def _inline(self) -> dict[Stage, tuple[Expr, Expr | None]]:
        bodies = {st: (st.op.body, st.op.post) for st in self.sch.stages}
        for st in self.sch.stages:
            if not st.inlined:
                continue
            body, axes, buf = bodies[st][0], st.op.axes, st.tensor.buffer

            def repl(e: Expr, body=body, axes=axes, buf=buf) -> Expr | None:
                if isinstance(e, Load) and e.buffer is buf:
                    return substitute(body, dict(zip(axes, e.indices)))
                return None

            for other in self.sch.stages:
                b, p = bodies[other]
                bodies[other] = (map_expr(b, repl), None if p is None else map_expr(p, repl))
        return bodies

    def _var(self, name: str, extent: int) -> Var:
        n = self.names.get(name, 0)
        self.names[name] = n + 1
        v = Var(name if n == 0 else f"{name}_{n}")
        self.ext[v] = extent
        return v

    # ------------------------------------------------------------------ one stage
    def emit(self, st: Stage, ctx: list[tuple[Var, ForKind]], region: _Region | None
             ) -> tuple[Stmt, Buffer]:
        """``st``'s loop nest inside the loops ``ctx`` (over ``region`` when it is attached
        to a consumer's loop), and the buffer it writes."""
        ext = self._extents(st, region)
        var = {a: self._var(a.name, ext[a]) for a in st.leaves}
        for a, v in var.items():
            self.axis_of_var[v] = a
        val, guards = _invert(st, var, ext)
        buf, gidx, sidx = _written(st, region, val, ext)
        body, post = self.bodies[st]
        subst: dict[Var, Expr] = dict(zip(st.op.axes, gidx))
        subst.update({r.var: val[ra] for ra, r in zip(st.reduce_axis, st.op.reduce_axes)})
        value = substitute(body, subst)
        if region is not None:
            # a tile may overhang the tensor: skip the points whose reads would fall outside
            # (they are never written back) rather than guard every point of the tile
            guards += [(g, True) for g in self._load_guards(value)]
        placed = _place(guards, {var[a]: i for i, a in enumerate(st.leaves)})
        stmt = self._nest(st, ctx, _update(st, buf, sidx, value), var, ext, buf, sidx, placed)
        if st.op.reduce_axes and post is not None:
            if region is not None:
                raise LoweringError(f"{st}: an epilogue on an attached reduction needs cache_write")
            stmt = Seq([stmt, self._post_pass(st, post, buf)])
        return stmt, buf

    def _extents(self, st: Stage, region: _Region | None) -> dict[Axis, int]:
        """The extent of every axis of ``st``: its tensor's (or region's) and reductions',
        then through its splits and fuses."""
        ext: dict[Axis, int] = {}
        if region is None:
            ext.update(zip(st.axis, st.tensor.shape))
        elif region.extents:
            ext.update(zip(st.axis, region.extents))
        else:
            ext.update(region.axis_extent)
        for ra, r in zip(st.reduce_axis, st.op.reduce_axes):
            ext[ra] = r.extent
        for rel in st.relations:
            if isinstance(rel, SplitRel):
                p = ext[rel.parent]
                if rel.factor:
                    inner = min(rel.factor, p)
                else:
                    assert rel.nparts, rel
                    inner = ceil(p / rel.nparts)
                ext[rel.inner], ext[rel.outer] = inner, ceil(p / inner)
            else:
                ext[rel.fused] = ext[rel.outer] * ext[rel.inner]
        return ext

    def _nest(self, st: Stage, ctx: list[tuple[Var, ForKind]], update: Stmt,
              var: dict[Axis, Var], ext: dict[Axis, int], buf: Buffer, sidx: list[Expr],
              placed: dict[int, list[tuple[Expr, bool]]]) -> Stmt:
        """The loops of ``st``'s leaves around ``update``, innermost first: each loop's
        guards inside it, the stages attached at it, the accumulator's initialisation
        before the outermost reduction loop."""
        leaves = st.leaves
        first_red = next((i for i, a in enumerate(leaves) if a.reduce), None)
        stmt = update
        for pos in range(len(leaves) - 1, -1, -1):
            stmt = _guard(stmt, [g for g, _ in placed.get(pos, [])])
            leaf = leaves[pos]
            enclosing = ctx + [(var[a], st.kinds.get(a, ForKind.SERIAL)) for a in leaves[:pos + 1]]
            for child in self.attached.get((id(st), leaf), []):
                stmt = self._attach(child, stmt, enclosing)
            stmt = For(var[leaf], ext[leaf], st.kinds.get(leaf, ForKind.SERIAL), stmt)
            if pos == first_red:
                stmt = Seq([self._init(st, leaves[pos + 1:], var, ext, buf, sidx, placed, pos),
                            stmt])
        return _guard(stmt, [g for g, _ in placed.get(-1, [])])

    def _load_guards(self, value: Expr) -> list[Expr]:
        """Conditions keeping the loads of ``value`` inside their buffers. A load in an arm of
        a ``Select`` (zero padding) needs none for the indices the select's condition tests."""
        out: list[Expr] = []
        stack: list[tuple[Expr, frozenset[Expr]]] = [(value, frozenset())]
        while stack:
            e, tested = stack.pop()
            if isinstance(e, Select):
                covered = tested | _compared(self._simplify_expr(e.cond))
                stack += [(e.cond, tested), (e.t, covered), (e.f, covered)]
                continue
            stack.extend((c, tested) for c in e.children())
            if not isinstance(e, Load):
                continue
            for i, n in zip(e.indices, e.buffer.shape):
                i = self._simplify_expr(i)
                if i in tested:
                    continue
                r = index_range(i, self.ext)
                if r is None or r[1] >= n:
                    out.append(cmp("<", i, n))
                if r is None or r[0] < 0:
                    out.append(cmp(">=", i, 0))
        return list(dict.fromkeys(out))

    def _init(self, st: Stage, inner: list[Axis], var: dict[Axis, Var], ext: dict[Axis, int],
              buf: Buffer, sidx: list[Expr], placed: dict, first_red: int) -> Stmt:
        """Set the accumulator to the combiner's identity (0 for a sum, -inf for a max) over
        the spatial loops inside the outermost reduction loop."""
        spatial = [a for a in inner if not a.reduce]
        fresh = {var[a]: self._var(a.name + "_init", ext[a]) for a in spatial}
        conds = [g for d, gs in placed.items() if d > first_red for g, red in gs if not red]
        stmt: Stmt = Store(buf, tuple(substitute(i, fresh) for i in sidx),
                           COMBINERS[st.op.combiner][0])
        stmt = _guard(stmt, [substitute(c, fresh) for c in conds])
        for a in reversed(spatial):
            kind = st.kinds.get(a, ForKind.SERIAL)
            stmt = For(fresh[var[a]], ext[a], ForKind.SERIAL if kind is ForKind.PARALLEL else kind,
                       stmt)
        return stmt

    def _post_pass(self, st: Stage, post: Expr, buf: Buffer) -> Stmt:
        """Apply an epilogue after a reduction computed in place (no cache_write)."""
        assert st.op.acc is not None, st
        vs = [self._var(f"{v.name}_post", n) for v, n in zip(st.op.axes, st.tensor.shape)]
        read = Load(buf, tuple(vs))
        stmt: Stmt = Store(buf, tuple(vs), substitute(post, {st.op.acc: read,
                                                              **dict(zip(st.op.axes, vs))}))
        for v, n in reversed(list(zip(vs, st.tensor.shape))):
            stmt = For(v, n, ForKind.SERIAL, stmt)
        return stmt

    # ------------------------------------------------------------------ compute_at
    def _attach(self, child: Stage, body: Stmt, enclosing: list[tuple[Var, ForKind]]) -> Stmt:
        src = child.tensor.buffer
        loads = loads_of(body, src)
        if not loads:
            raise LoweringError(f"{child} is attached where {src.name} is not read")
        inner = loop_extents(body)
        if child.scope is Scope.SHARED:  # a block-wide tile covers every thread's part
            for v, kind in enclosing:
                if kind in _BLOCK_SHARED:
                    inner[v] = self.ext[v]
        region = self._per_var(child, loads, inner) if child.per_var_region else \
            self._box(child, loads, inner)
        stmt, buf = self.emit(child, enclosing, region)
        idx = None if region.extents else tuple(region.consumer_vars[a] for a in child.axis)
        redirect = _Redirect(src, buf, region.bases, idx, self._simplify_expr)
        body = map_stmt_exprs(body, redirect.expr)
        parts = [stmt, Sync(), body, Sync()] if child.scope is Scope.SHARED else [stmt, body]
        return Allocate(buf, Seq(parts))

    def _box(self, child: Stage, loads: list[Load], inner: dict[Var, int]) -> _Region:
        bases: list[Expr] = []
        extents: list[int] = []
        for d, n in enumerate(child.tensor.shape):
            box = self._box_dim(loads, d, inner)
            if box is None:  # not affine: cache the whole dimension
                bases.append(Const(0))
                extents.append(n)
            else:
                bases.append(box[0])
                extents.append(box[1])
        return _Region(bases, extents=extents)

    def _box_dim(self, loads: list[Load], d: int, inner: dict[Var, int]
                 ) -> tuple[Expr, int] | None:
        """Base and extent of dimension ``d`` over all ``loads`` when every index is the same
        outer expression plus an affine form of the ``inner`` loops, else None."""
        lo = hi = 0
        outer_key: frozenset[tuple[Expr, int]] | None = None
        for ld in loads:
            a = affine(self._simplify_expr(ld.indices[d]), inner)
            if a is None:
                return None
            coefs, c = a
            outer = {v: k for v, k in coefs.items() if v not in inner}
            r = affine_range({v: k for v, k in coefs.items() if v in inner}, c, inner)
            key = frozenset(outer.items())
            if r is None or (outer_key is not None and key != outer_key):
                return None
            lo, hi = (r[0], r[1]) if outer_key is None else (min(lo, r[0]), max(hi, r[1]))
            outer_key = key
        if outer_key is None:
            return None
        return from_affine(dict(outer_key), lo), hi - lo + 1

    def _per_var(self, child: Stage, loads: list[Load], inner: dict[Var, int]) -> _Region:
        first = loads[0]
        if any(ld.indices != first.indices for ld in loads[1:]):
            raise LoweringError(f"{child}: its consumer reads it at different indices")
        mirror_of = {a.mirror: a for a in child.axis}
        region = _Region([])
        for e in first.indices:
            a = affine(self._simplify_expr(e), inner)
            if a is None:
                raise LoweringError(f"{child}: consumer index {e!r} is not affine")
            coefs, c = a
            outer: dict[Expr, int] = {}
            terms: list[tuple[Axis, int]] = []
            for v, k in coefs.items():
                if not isinstance(v, Var) or v not in inner:
                    outer[v] = k
                    continue
                ax = mirror_of.get(self.axis_of_var.get(v))
                if ax is None:
                    raise LoweringError(f"{child}: loop {v} is not one of its mirrored axes")
                terms.append((ax, k))
                region.axis_extent[ax] = inner[v]
                region.consumer_vars[ax] = v
            region.bases.append(from_affine(outer, c))
            region.terms.append(terms)
        for ax in child.axis:  # a consumer loop the index does not use: extent 1
            if ax not in region.consumer_vars:
                raise LoweringError(f"{child}: consumer loop {ax} does not index it")
        return region


class _Simplifier(StmtMutator):
    """Simplify every expression and drop guards that the loop ranges decide."""

    def __init__(self, simplify: Callable[[Expr], Expr]) -> None:
        self.simplify = simplify

    def visit_if(self, s: IfThenElse) -> Stmt:
        c = self.simplify(s.cond)
        if isinstance(c, Const):
            if c.value:
                return self.visit(s.then)
            return Seq([]) if s.else_ is None else self.visit(s.else_)
        return IfThenElse(c, self.visit(s.then),
                          None if s.else_ is None else self.visit(s.else_))

    def visit_leaf(self, s: Stmt) -> Stmt:
        return map_stmt_exprs(s, self.simplify)


class _Redirect:
    """Rewrites the loads of ``src`` as loads of its cached copy ``buf``: at ``idx`` (per-var
    regions) or at the index minus the region's base (boxes). A class, not closures: nested
    closures referring to each other form reference cycles that kept each lowering's
    expressions alive until the cyclic collector ran."""

    def __init__(self, src: Buffer, buf: Buffer, bases: list[Expr],
                 idx: tuple[Expr, ...] | None, simplify: Callable[[Expr], Expr]) -> None:
        self.src, self.buf, self.bases, self.idx = src, buf, bases, idx
        self.simplify = simplify

    def load(self, x: Expr) -> Expr | None:
        if not isinstance(x, Load) or x.buffer is not self.src:
            return None
        if self.idx is not None:
            return Load(self.buf, self.idx)
        return Load(self.buf, tuple(self.simplify(i - b) for i, b in zip(x.indices, self.bases)))

    def expr(self, e: Expr) -> Expr:
        return map_expr(e, self.load)


def _invert(st: Stage, var: dict[Axis, Var], ext: dict[Axis, int]
            ) -> tuple[dict[Axis, Expr], list[tuple[Expr, bool]]]:
    """Each axis's value in the leaf loops' variables (splits and fuses inverted), and the
    guards of split tails that overhang their parent: (condition, involves a reduction)."""
    val: dict[Axis, Expr] = dict(var)
    guards: list[tuple[Expr, bool]] = []
    for rel in reversed(st.relations):
        if isinstance(rel, SplitRel):
            val[rel.parent] = add(mul(val[rel.outer], ext[rel.inner]), val[rel.inner])
            if ext[rel.outer] * ext[rel.inner] > ext[rel.parent]:
                guards.append((cmp("<", val[rel.parent], ext[rel.parent]), rel.parent.reduce))
        else:
            val[rel.outer] = val[rel.fused] // ext[rel.inner]
            val[rel.inner] = val[rel.fused] % ext[rel.inner]
    return val, guards


def _written(st: Stage, region: _Region | None, val: dict[Axis, Expr], ext: dict[Axis, int]
             ) -> tuple[Buffer, list[Expr], list[Expr]]:
    """The buffer ``st`` writes (its tensor's, or a cache over ``region``), the tensor
    index of each point and the index stored to."""
    if region is None:
        gidx = [val[a] for a in st.axis]
        return st.tensor.buffer, gidx, gidx
    if region.extents:
        gidx = [add(b, val[a]) for b, a in zip(region.bases, st.axis)]
        buf = Buffer(st.tensor.name, tuple(region.extents), st.tensor.dtype, st.scope)
    else:
        gidx = []
        for b, terms in zip(region.bases, region.terms):
            e = b
            for a, c in terms:
                e = add(e, mul(val[a], c))
            gidx.append(e)
        buf = Buffer(st.tensor.name, tuple(ext[a] for a in st.axis), st.tensor.dtype,
                     st.scope)
    return buf, gidx, [val[a] for a in st.axis]


def _update(st: Stage, buf: Buffer, sidx: list[Expr], value: Expr) -> Stmt:
    """The store of one point: ``value``, or its combination into the accumulator."""
    if not st.op.reduce_axes:
        return Store(buf, tuple(sidx), value)
    combine = COMBINERS[st.op.combiner][1]
    return Store(buf, tuple(sidx), combine(Load(buf, tuple(sidx)), value))


def _place(guards: list[tuple[Expr, bool]], depth: dict[Var, int]
           ) -> dict[int, list[tuple[Expr, bool]]]:
    """Each guard at the depth of the innermost leaf loop whose variable it tests (-1:
    outside every loop), so it sits as far out as its variables allow."""
    placed: dict[int, list[tuple[Expr, bool]]] = {}
    for g in guards:
        d = max((depth[x] for x in walk(g[0]) if isinstance(x, Var) and x in depth), default=-1)
        placed.setdefault(d, []).append(g)
    return placed


def _compared(cond: Expr) -> frozenset[Expr]:
    """The integer expressions a condition compares with constants."""
    return frozenset(x.a for x in walk(cond)
                     if isinstance(x, Cmp) and isinstance(x.b, Const) and x.a.dtype == "int64")


def _guard(stmt: Stmt, conds: list[Expr]) -> Stmt:
    for c in conds:
        stmt = IfThenElse(c, stmt)
    return stmt
