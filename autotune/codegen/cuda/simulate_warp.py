"""Tensor-core fragments and ``cp.async`` copies in the CUDA execution model (``simulate``).

A warp is 32 consecutive linear thread ids of a block (x fastest). Its fragments (buffers of
a ``wmma.*`` scope) hold one (rows x cols) float32 tile per element and warp, poison until
written. The warp-collective statements (``MmaFill``/``MmaLoad``/``MmaSync``/``MmaStore``)
need all 32 lanes of the warp (``divergent_warp``) with the same operands
(``nonuniform_warp``), a 256-bit aligned pointer and ``ldm`` a multiple of 16 bytes
(``misaligned``), as ``nvcuda::wmma`` states. Their memory accesses are the warp's, owned by
its lane 0 for race tracking: other threads, its own lanes' plain accesses included, need a
barrier; an ``MmaStore`` whose rows overlap (``ldm`` below the row length) is a race among
the warp's lanes.

An ``AsyncCopy`` (4, 8 or 16 bytes, both addresses aligned to the size) leaves its shared
destination in flight until the issuing thread's ``AsyncWait`` covers its group; touching an
element in flight is ``async_pending``. The data lands at that wait, as the thread's write
in the barrier phase of the wait. Statements no CUDA compiler would accept as written (operand
scopes and types, one shape and layout per fragment buffer) are ``invalid_statement``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.codegen.cuda.semantics import flat_index
from autotune.codegen.cuda.simulate_builder import ClosureBuilder, Handler
from autotune.codegen.cuda.simulate_core import (
    Env,
    ExprFn,
    Grid,
    Memory,
    StmtFn,
    broadcast,
    check_access,
    describe_lane,
    track_access,
)
from autotune.codegen.cuda.simulate_error import CudaExecutionError
from autotune.ir.expr import HALF_DTYPES, Expr
from autotune.ir.stmt import (
    WARP,
    WMMA_SHAPES,
    Allocate,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Buffer,
    MmaFill,
    MmaLoad,
    MmaStore,
    MmaSync,
    Scope,
    Stmt,
    format_stmt,
    fragment_dims,
    walk_stmts,
)
from autotune.ops.dtypes import element_bytes, round_to

WMMA_ALIGN = 32    # bytes: load/store_matrix_sync take a 256-bit aligned pointer
LDM_ALIGN = 16     # bytes: ldm a multiple of 8 half or 4 float elements
COPY_BYTES = (4, 8, 16)
# what a buffer's first element is aligned to: cudaMalloc gives 256 bytes; the emitter
# declares a shared array that wmma or cp.async touches __align__(128)
BASE_ALIGN = {Scope.GLOBAL: 256, Scope.SHARED: 128}
_MEMORY = (Scope.GLOBAL, Scope.SHARED)


class WarpState:
    """Per chunk of blocks: the warp of each lane, and each thread's cp.async groups."""

    def __init__(self, g: Grid):
        per_block = -(-g.threads // WARP)
        self.warp: np.ndarray = g.local_block * per_block + g.tid // WARP  # warp in the chunk
        self.count = g.blocks * per_block
        self.size: np.ndarray = np.bincount(self.warp, minlength=self.count)
        self.committed: np.ndarray = np.zeros(g.lanes, np.int64)  # groups closed per thread
        self.completed: np.ndarray = np.zeros(g.lanes, np.int64)  # groups landed per thread
        # per shared buffer and element in flight: the issuing lane (-1: none), its group
        self.flight: dict[Buffer, tuple[np.ndarray, np.ndarray]] = {}

    def check_landed(self, g: Grid, mem: Memory, keys: np.ndarray, lanes: np.ndarray,
                     write: bool, text: str, warp: bool) -> None:
        """Raise ``async_pending`` when an access touches an element of a copy in flight."""
        fl = self.flight.get(mem.buffer)
        if fl is None:
            return
        issuer = fl[0][keys]
        busy = issuer >= 0
        if not busy.any():
            return
        k = int(np.argmax(busy))
        who, blk, thr, w = describe_lane(g, int(lanes[k]), warp)
        _, by = g.coords(int(issuer[k]))
        index = int(keys[k]) % mem.buffer.size
        verb = "writes" if write else "reads"
        raise CudaExecutionError(
            "async_pending", f"{who} {verb} {mem.buffer.name}[{index}] while thread {by}'s "
            "cp.async into it is in flight (before that thread's cp.async.wait_group covers "
            "it)", buffer=mem.buffer.name, index=index, block=blk, thread=thr, warp=w,
            other_thread=by, statement=text)


def _state(g: Grid) -> WarpState:
    if g.warps is None:
        g.warps = WarpState(g)
    return g.warps


def warp_stmt(c: ClosureBuilder, s: Stmt) -> StmtFn:
    """The closure that runs one fragment allocation, tensor-core or cp.async statement."""
    text = c.context = format_stmt(s)[0].strip() if not isinstance(s, Allocate) else ""
    if isinstance(s, Allocate):
        return _allocate(c, s)
    if isinstance(s, (MmaFill, MmaLoad, MmaSync, MmaStore)):
        return _Collective(c, s, text).run
    if isinstance(s, AsyncCopy):
        return _copy(c, s, text)
    if isinstance(s, AsyncCommit):
        def commit(g: Grid, env: Env, mask: np.ndarray) -> None:
            _state(g).committed[mask] += 1
        return commit
    if isinstance(s, AsyncWait):
        return _wait(s, text)
    raise TypeError(f"unknown statement {type(s).__name__}")


# the statements ``warp_stmt`` runs (an ``Allocate`` when it allocates a fragment)
WARP_HANDLERS: dict[type, Handler] = dict.fromkeys(
    (Allocate, MmaFill, MmaLoad, MmaSync, MmaStore, AsyncCopy, AsyncCommit, AsyncWait),
    warp_stmt)


def _invalid(s: Stmt, buf: Buffer, why: str) -> CudaExecutionError:
    text = format_stmt(s)[0].strip()
    return CudaExecutionError("invalid_statement", f"{buf.name}: {why}", buffer=buf.name,
                              statement=text)


# ---------------------------------------------------------------- fragments

@dataclass(frozen=True)
class FragmentType:
    """A fragment buffer's one shape and layout (what its C++ ``wmma::fragment`` type
    fixes)."""

    buffer: Buffer
    rows: int
    cols: int
    layout: str | None  # A and B fragments: "row" or "col"; None for the accumulator


def _frag_type(buf: Buffer, body: Stmt) -> FragmentType:
    """The fragment type of ``buf`` from every statement that uses it (one shape, one
    layout for an A or B fragment, the element type the scope allows)."""
    shapes: set[tuple[int, int, int]] = set()
    layouts: set[str] = set()
    first: Stmt | None = None
    for s in walk_stmts(body):
        if isinstance(s, (MmaFill, MmaLoad, MmaStore)):
            frags: tuple[Buffer, ...] = (s.frag,)
        elif isinstance(s, MmaSync):
            frags = (s.acc, s.a, s.b)
        else:
            continue
        if buf not in frags:
            continue
        if first is None:
            first = s
        m, n, k = s.shape
        shapes.add((m, n, k))
        if isinstance(s, MmaLoad) and buf.scope is not Scope.WMMA_ACC:
            layouts.add(s.layout)
    if first is None:
        return FragmentType(buf, 1, 1, None)
    if len(shapes) > 1 or len(layouts) > 1:
        raise _invalid(first, buf, f"one fragment type has one shape and layout, here shapes "
                                   f"{sorted(shapes)} and layouts {sorted(layouts)}")
    shape = shapes.pop()
    if shape not in WMMA_SHAPES:
        raise _invalid(first, buf, f"wmma has no shape {shape}; it has {list(WMMA_SHAPES)}")
    allowed = ("float32",) if buf.scope is Scope.WMMA_ACC else HALF_DTYPES
    if buf.dtype not in allowed:
        raise _invalid(first, buf, f"a {buf.scope.value} fragment of {buf.dtype}; "
                                   f"wmma takes {' or '.join(allowed)}")
    rows, cols = fragment_dims(buf.scope, shape)
    return FragmentType(buf, rows, cols, layouts.pop() if layouts else None)


def _allocate(c: ClosureBuilder, s: Allocate) -> StmtFn:
    frag = _frag_type(s.buffer, s.body)
    c.fragments[s.buffer] = frag
    body, buf, n = c.visit(s.body), s.buffer, frag.rows * frag.cols

    def alloc(g: Grid, env: Env, mask: np.ndarray) -> None:
        # fragments declared here hold poison, whatever an earlier trip left
        count = _state(g).count
        g.memory[buf] = Memory.new(buf, np.zeros(count * buf.size * n, np.float32),
                                    defined=False, tracked=False)
        body(g, env, mask)
    return alloc


class _Collective:
    """One warp-collective statement: its static checks, then per run the warps that
    execute it, their uniform operands and the fragment arithmetic."""

    def __init__(self, c: ClosureBuilder, s: MmaFill | MmaLoad | MmaSync | MmaStore, text: str):
        self.s, self.text = s, text
        self.ops: list[ExprFn] = []  # uniform operands: offsets, then fragment indices
        self.names: list[tuple[str, Buffer]] = []  # each operand's name and its buffer
        if isinstance(s, (MmaLoad, MmaStore)):
            self._operand(c, s.offset, "offset", s.src if isinstance(s, MmaLoad) else s.dst)
        self.frags: list[tuple[FragmentType, int]] = []  # each fragment operand and its operand
        pairs: list[tuple[Buffer, tuple[Expr, ...], Scope | None]]
        if isinstance(s, MmaSync):
            pairs = [(s.acc, s.acc_index, Scope.WMMA_ACC), (s.a, s.a_index, Scope.WMMA_A),
                     (s.b, s.b_index, Scope.WMMA_B)]
        else:
            pairs = [(s.frag, s.index, Scope.WMMA_ACC if isinstance(s, MmaStore) else None)]
        for buf, index, role in pairs:
            if buf not in c.fragments:
                raise _invalid(s, buf, "not an allocated fragment buffer")
            if role is not None and buf.scope is not role:
                raise _invalid(s, buf, f"a {buf.scope.value} fragment where {role.value} goes")
            self.frags.append((c.fragments[buf], len(self.ops)))
            self._operand(c, flat_index(buf, index, c.ext), "fragment index", buf)
        if isinstance(s, MmaSync):
            if s.a.dtype != s.b.dtype:
                raise _invalid(s, s.a, f"mma of {s.a.dtype} x {s.b.dtype} into {s.acc.dtype}")
        elif isinstance(s, (MmaLoad, MmaStore)):
            mem = s.src if isinstance(s, MmaLoad) else s.dst
            if mem.scope not in _MEMORY or mem.dtype != s.frag.dtype:
                raise _invalid(s, mem, f"a {mem.dtype} {mem.scope.value} buffer; the fragment "
                                       f"needs a {s.frag.dtype} pointer to global or shared")
            self.item = element_bytes(mem.dtype)
            self.bad_ldm = s.ldm * self.item % LDM_ALIGN != 0
            frag = self.frags[0][0]
            r, col = np.divmod(np.arange(frag.rows * frag.cols), frag.cols)
            col_major = isinstance(s, MmaLoad) and s.layout == "col"
            self.pattern: np.ndarray = col * s.ldm + r if col_major else r * s.ldm + col

    def _operand(self, c: ClosureBuilder, e: Expr, name: str, buf: Buffer) -> None:
        self.ops.append(c.expr(e))
        self.names.append((name, buf))

    def run(self, g: Grid, env: Env, mask: np.ndarray) -> None:
        st = _state(g)
        leaders = self._warps(g, st, mask)
        if not leaders.size:
            return
        vals = self._uniform(g, env, mask, leaders)
        w = st.warp[leaders]
        slots = [self._slot(g, f, vals[:, j], leaders) for f, j in self.frags]
        s = self.s
        if isinstance(s, MmaFill):
            f = self.frags[0][0]
            data, written = _frag_view(g, f)
            data[w, slots[0]] = round_to(np.full(1, s.value, np.float32), f.buffer.dtype)
            written[w, slots[0]] = True
        elif isinstance(s, MmaSync):
            acc = self.frags[0][0]
            m, n, k = s.shape
            tiles: list[np.ndarray] = [
                self._read(g, f, w, slot, leaders).astype(np.float64).reshape(-1, r, c)
                for (f, _), slot, (r, c) in zip(self.frags, slots, ((m, n), (m, k), (k, n)))]
            d, x, y = tiles
            data, _ = _frag_view(g, acc)
            data[w, slots[0]] = round_to((d + x @ y).reshape(len(w), -1), acc.buffer.dtype)
        else:
            self._move(g, vals[:, 0], w, slots[0], leaders)

    def _move(self, g: Grid, offset: np.ndarray, w: np.ndarray, slot: np.ndarray,
              leaders: np.ndarray) -> None:
        """MmaLoad or MmaStore: the warp's elements of global or shared memory."""
        s = self.s
        assert isinstance(s, (MmaLoad, MmaStore))
        mem_buf = s.src if isinstance(s, MmaLoad) else s.dst
        load = isinstance(s, MmaLoad)
        bad = (offset * self.item % WMMA_ALIGN != 0) | (BASE_ALIGN[mem_buf.scope] < WMMA_ALIGN)
        if bad.any() or self.bad_ldm:
            i = int(np.argmax(bad)) if bad.any() else 0
            who, blk, thr, wi = describe_lane(g, int(leaders[i]), True)
            why = (f"ldm {s.ldm} is {s.ldm * self.item} bytes, not a multiple of {LDM_ALIGN}"
                   if self.bad_ldm else
                   f"the pointer {mem_buf.name} + {int(offset[i])} is not {WMMA_ALIGN}-byte "
                   f"aligned ({mem_buf.scope.value} arrays start {BASE_ALIGN[mem_buf.scope]}-"
                   "byte aligned)")
            raise CudaExecutionError("misaligned", f"{who}: {why}", buffer=mem_buf.name,
                                     index=int(offset[i]), block=blk, thread=thr, warp=wi,
                                     statement=self.text)
        frag = self.frags[0][0]
        n = frag.rows * frag.cols
        if not load and s.ldm < frag.cols:  # lanes holding different elements store to one
            who, blk, thr, wi = describe_lane(g, int(leaders[0]), True)
            raise CudaExecutionError(
                "race", f"{who} stores rows of {frag.cols} elements {s.ldm} apart into "
                f"{mem_buf.name}: its lanes write one element twice", buffer=mem_buf.name,
                index=int(offset[0]) + s.ldm, block=blk, thread=thr, warp=wi,
                statement=self.text)
        index = (offset[:, None] + self.pattern[None, :]).reshape(-1)
        mem = g.memory[mem_buf]
        keys = check_access(g, mem, index, np.repeat(leaders, n), not load, self.text, warp=True)
        data, written = _frag_view(g, frag)
        if load:
            data[w, slot] = round_to(mem.data[keys].reshape(len(w), n), frag.buffer.dtype)
            written[w, slot] = True
        else:
            vals = self._read(g, frag, w, slot, leaders).reshape(-1)
            mem.data[keys] = round_to(vals, mem_buf.dtype)
            if mem.written is not None:
                mem.written[keys] = True

    def _warps(self, g: Grid, st: WarpState, mask: np.ndarray) -> np.ndarray:
        """Lane 0 of each warp that runs the statement; ``divergent_warp`` unless all 32
        lanes of each such warp run it."""
        active = np.bincount(st.warp[mask], minlength=st.count)
        part = (active > 0) & ((active < WARP) | (st.size < WARP))
        if part.any():
            wi = int(np.argmax(part))
            lanes = np.nonzero(st.warp == wi)[0]
            inside, outside = lanes[mask[lanes]], lanes[~mask[lanes]]
            blk, t_in = g.coords(int(inside[0]))
            if outside.size:
                _, t_out = g.coords(int(outside[0]))
                why = f"{int(active[wi])} of its 32 lanes run it: thread {t_out} does not"
            else:
                t_out = t_in
                why = f"the warp has only {int(st.size[wi])} threads (a block of {g.threads})"
            buf = self.names[0][1]  # the memory, or the (first) fragment, it works on
            raise CudaExecutionError(
                "divergent_warp", f"warp {int(g.tid[inside[0]]) // WARP} of block {blk} runs a "
                f"warp-collective statement, but {why}", buffer=buf.name, block=blk,
                thread=t_out, other_thread=t_in, warp=int(g.tid[inside[0]]) // WARP,
                statement=self.text)
        return np.nonzero(mask & (g.tid % WARP == 0))[0]

    def _uniform(self, g: Grid, env: Env, mask: np.ndarray, leaders: np.ndarray
                 ) -> np.ndarray:
        """The operands per warp (warps x operands); ``nonuniform_warp`` where lanes of a
        warp disagree."""
        lanes = leaders[:, None] + np.arange(WARP)[None, :]
        out: np.ndarray = np.zeros((len(leaders), len(self.ops)), np.int64)
        for j, (op, (name, buf)) in enumerate(zip(self.ops, self.names)):
            v = broadcast(op(g, env, mask), g.lanes)[lanes]
            differ = v != v[:, :1]
            if differ.any():
                i, lane = np.argwhere(differ)[0]
                who, blk, thr, w = describe_lane(g, int(leaders[i]), True)
                _, other = g.coords(int(lanes[i, lane]))
                raise CudaExecutionError(
                    "nonuniform_warp", f"{who}: its {name} into {buf.name} is {int(v[i, 0])} in "
                    f"thread {thr} but {int(v[i, lane])} in thread {other}; a warp-collective "
                    "operand must be the same in all 32 lanes", buffer=buf.name,
                    index=int(v[i, 0]), block=blk, thread=thr, other_thread=other, warp=w,
                    statement=self.text)
            out[:, j] = v[:, 0]
        return out

    def _slot(self, g: Grid, f: FragmentType, index: np.ndarray, leaders: np.ndarray
              ) -> np.ndarray:
        bad = (index < 0) | (index >= f.buffer.size)
        if bad.any():
            i = int(np.argmax(bad))
            who, blk, thr, w = describe_lane(g, int(leaders[i]), True)
            raise CudaExecutionError(
                "out_of_bounds", f"{who} uses fragment {f.buffer.name}[{int(index[i])}] outside "
                f"its {f.buffer.size} fragments", buffer=f.buffer.name, index=int(index[i]),
                block=blk, thread=thr, warp=w, statement=self.text)
        return index

    def _read(self, g: Grid, f: FragmentType, w: np.ndarray, slot: np.ndarray,
              leaders: np.ndarray) -> np.ndarray:
        data, written = _frag_view(g, f)
        unset = ~written[w, slot]
        if unset.any():
            i = int(np.argmax(unset))
            who, blk, thr, wi = describe_lane(g, int(leaders[i]), True)
            raise CudaExecutionError(
                "uninitialized", f"{who} reads fragment {f.buffer.name}[{int(slot[i])}], which "
                "the warp never filled, loaded or computed", buffer=f.buffer.name,
                index=int(slot[i]), block=blk, thread=thr, warp=wi, statement=self.text)
        return data[w, slot]


def _frag_view(g: Grid, f: FragmentType) -> tuple[np.ndarray, np.ndarray]:
    """(values, written) of fragment buffer ``f`` as (warp, fragment, element) and (warp,
    fragment) arrays."""
    mem = g.memory[f.buffer]
    assert mem.written is not None
    n = f.rows * f.cols
    data = mem.data.reshape(-1, f.buffer.size, n)
    # a fragment is written whole: its first element's flag stands for it
    return data, mem.written.reshape(-1, f.buffer.size, n)[:, :, 0]


# ---------------------------------------------------------------- cp.async

def _copy(c: ClosureBuilder, s: AsyncCopy, text: str) -> StmtFn:
    item = element_bytes(s.dst.dtype)
    nbytes = s.elems * item
    if s.dst.scope is not Scope.SHARED or s.src.scope is not Scope.GLOBAL:
        raise _invalid(s, s.dst, "cp.async copies from global to shared memory")
    if s.src.dtype != s.dst.dtype or nbytes not in COPY_BYTES:
        raise _invalid(s, s.dst, f"cp.async of {s.elems} {s.src.dtype} into {s.dst.dtype}: it "
                                 f"moves 4, 8 or 16 bytes of one type")
    dst_off, src_off = c.expr(s.dst_offset), c.expr(s.src_offset)
    valid = None if s.valid is None else c.expr(s.valid)
    span = np.arange(s.elems)

    def copy(g: Grid, env: Env, mask: np.ndarray) -> None:
        lanes = np.nonzero(mask)[0]
        if not lanes.size:
            return
        st = _state(g)
        d = broadcast(dst_off(g, env, mask), g.lanes)[lanes].astype(np.int64)
        src = broadcast(src_off(g, env, mask), g.lanes)[lanes].astype(np.int64)
        ok = (np.ones(lanes.size, bool) if valid is None
              else broadcast(valid(g, env, mask), g.lanes)[lanes].astype(bool))
        # (where ``valid`` is false the emitter passes the source buffer's start)
        for buf, off in ((s.dst, d), (s.src, np.where(ok, src, 0))):
            bad = (off * item % nbytes != 0) | (BASE_ALIGN[buf.scope] < nbytes)
            if bad.any():
                i = int(np.argmax(bad))
                who, blk, thr, _ = describe_lane(g, int(lanes[i]), False)
                raise CudaExecutionError(
                    "misaligned", f"{who}: cp.async of {nbytes} bytes at {buf.name} + "
                    f"{int(off[i])} is not {nbytes}-byte aligned", buffer=buf.name,
                    index=int(off[i]), block=blk, thread=thr, statement=text)
        vals: np.ndarray = np.zeros((lanes.size, s.elems), np.float32)
        if ok.any():
            src_mem = g.memory[s.src]
            keys = check_access(g, src_mem, (src[ok][:, None] + span).reshape(-1),
                           np.repeat(lanes[ok], s.elems), False, text)
            vals[ok] = src_mem.data[keys].reshape(-1, s.elems)
        mem = g.memory[s.dst]
        keys = check_access(g, mem, (d[:, None] + span).reshape(-1), np.repeat(lanes, s.elems),
                       True, text)
        mem.data[keys] = vals.reshape(-1)
        if s.dst not in st.flight:
            st.flight[s.dst] = (np.full(mem.data.size, -1, np.int64),
                                np.zeros(mem.data.size, np.int64))
        issuer, group = st.flight[s.dst]
        owners: np.ndarray = np.repeat(lanes, s.elems)
        issuer[keys] = owners
        group[keys] = st.committed[owners]  # the thread's open group
    return copy


def _wait(s: AsyncWait, text: str) -> StmtFn:
    pending = s.pending

    def wait(g: Grid, env: Env, mask: np.ndarray) -> None:
        st = _state(g)
        st.completed[mask] = np.maximum(st.completed[mask], st.committed[mask] - pending)
        for buf, (issuer, group) in st.flight.items():
            busy = issuer >= 0
            done = np.nonzero(busy & (group < st.completed[np.where(busy, issuer, 0)]))[0]
            if not done.size:
                continue
            owners = issuer[done]
            issuer[done] = -1
            mem = g.memory[buf]
            assert mem.written is not None
            mem.written[done] = True
            # the data lands now: a write by its thread in this barrier phase
            track_access(g, mem, done, g.tid[owners], owners, done % buf.size, True, text)
    return wait
