"""Statement nodes of the loop IR (the loop AST) and the function that holds them.

The loop AST is what both code generators and the cost model's feature extraction read:
loops with static extents (starting at 0) and an annotation, stores/loads with one index
expression per buffer dimension, allocations with a memory scope, guards, barriers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from math import prod
from typing import Iterator

from autotune.ir.expr import FLOAT, Expr, Load, Var, const


class Scope(str, Enum):
    GLOBAL = "global"  # kernel arguments and runtime-allocated workspaces
    LOCAL = "local"    # per-thread registers / stack (CPU: alloca)
    SHARED = "shared"  # CUDA shared memory of a thread block
    # CUDA warp-level matrix fragments (nvcuda::wmma): each element of such a buffer is one
    # fragment, an m x k (A), k x n (B) or m x n (accumulator) tile held by a whole warp
    WMMA_A = "wmma.matrix_a"
    WMMA_B = "wmma.matrix_b"
    WMMA_ACC = "wmma.accumulator"

    @property
    def is_fragment(self) -> bool:
        return self.value.startswith("wmma.")


def as_scope(scope: str | Scope) -> Scope:
    """``Scope(scope)`` without the Enum's slow path (a Python-level ``__call__``) for a
    member already."""
    return scope if isinstance(scope, Scope) else Scope(scope)


class Buffer:
    """A dense row-major array. Compared by identity."""

    __slots__ = ("name", "shape", "dtype", "scope", "strides")

    def __init__(self, name: str, shape: tuple[int, ...], dtype: str = FLOAT,
                 scope: Scope = Scope.GLOBAL):
        self.name = name
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype
        self.scope = as_scope(scope)
        strides, acc = [], 1
        for s in reversed(self.shape):
            strides.append(acc)
            acc *= s
        self.strides = tuple(reversed(strides))

    def __reduce__(self) -> tuple:  # compiled (mypyc) classes pickle through their __init__
        return Buffer, (self.name, self.shape, self.dtype, self.scope)

    @property
    def size(self) -> int:
        return prod(self.shape)

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {self.shape}, {self.scope.value})"

    def __getitem__(self, idx: Expr | int | tuple) -> "Expr":
        if not isinstance(idx, tuple):
            idx = (idx,)
        return Load(self, tuple(const(i) for i in idx))


class ForKind(str, Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"        # CPU: iterations spread over the thread pool
    VECTORIZED = "vectorized"    # CPU: one SIMD operation per lane group
    UNROLLED = "unrolled"
    BLOCK_X = "blockIdx.x"
    BLOCK_Y = "blockIdx.y"
    BLOCK_Z = "blockIdx.z"
    THREAD_X = "threadIdx.x"
    THREAD_Y = "threadIdx.y"
    THREAD_Z = "threadIdx.z"
    VTHREAD = "vthread"          # CUDA: virtual thread, unrolled with a strided pattern

    @property
    def is_thread_binding(self) -> bool:
        return self.value.startswith(("blockIdx", "threadIdx"))


def as_kind(kind: str | ForKind) -> ForKind:
    """``ForKind(kind)`` without the Enum's slow path for a member already."""
    return kind if isinstance(kind, ForKind) else ForKind(kind)


class Stmt:
    __slots__ = ()

    def children(self) -> tuple["Stmt", ...]:
        return ()


class For(Stmt):
    __slots__ = ("var", "extent", "kind", "body")

    def __init__(self, var: Var, extent: int, kind: ForKind, body: Stmt):
        self.var, self.extent, self.kind, self.body = var, int(extent), as_kind(kind), body

    def __reduce__(self) -> tuple:
        return For, (self.var, self.extent, self.kind, self.body)

    def children(self) -> tuple[Stmt, ...]:
        return (self.body,)


class Seq(Stmt):
    __slots__ = ("stmts",)
    stmts: tuple[Stmt, ...]

    def __init__(self, stmts: list[Stmt] | tuple[Stmt, ...]):
        flat: list[Stmt] = []
        for s in stmts:
            flat.extend(s.stmts if isinstance(s, Seq) else [s])
        self.stmts = tuple(flat)

    def __reduce__(self) -> tuple:
        return Seq, (self.stmts,)

    def children(self) -> tuple[Stmt, ...]:
        return self.stmts


class Store(Stmt):
    __slots__ = ("buffer", "indices", "value")

    def __init__(self, buffer: Buffer, indices: tuple[Expr, ...], value: Expr):
        assert len(indices) == len(buffer.shape), (buffer.name, indices)
        self.buffer, self.indices, self.value = buffer, tuple(indices), value

    def __reduce__(self) -> tuple:
        return Store, (self.buffer, self.indices, self.value)


class Allocate(Stmt):
    """Scope of a temporary buffer; ``body`` may read and write it."""

    __slots__ = ("buffer", "body")

    def __init__(self, buffer: Buffer, body: Stmt):
        self.buffer, self.body = buffer, body

    def __reduce__(self) -> tuple:
        return Allocate, (self.buffer, self.body)

    def children(self) -> tuple[Stmt, ...]:
        return (self.body,)


class IfThenElse(Stmt):
    __slots__ = ("cond", "then", "else_")

    def __init__(self, cond: Expr, then: Stmt, else_: Stmt | None = None):
        self.cond, self.then, self.else_ = cond, then, else_

    def __reduce__(self) -> tuple:
        return IfThenElse, (self.cond, self.then, self.else_)

    def children(self) -> tuple[Stmt, ...]:
        return (self.then,) if self.else_ is None else (self.then, self.else_)


class Sync(Stmt):
    """Barrier among the threads of a block (``__syncthreads()``); a no-op on CPUs."""

    __slots__ = ()

    def __reduce__(self) -> tuple:
        return Sync, ()


# ---------------------------------------------------------------- warp-level matrix ops
# Tensor-core statements (CUDA only). Each is collective over a warp: all WARP threads of
# the warp execute it together, with the same operands. Offsets are flat element offsets into
# a buffer (the fragment's (0, 0) element); ``ldm`` is the leading dimension in elements.
# ``shape`` is the MMA shape (m, n, k), one that nvcuda::wmma offers for half inputs.

WARP = 32  # threads of a warp, which runs the warp-collective statements together
WMMA_SHAPES: tuple[tuple[int, int, int], ...] = ((16, 16, 16), (32, 8, 16), (8, 32, 16))


def fragment_dims(scope: Scope, shape: tuple[int, int, int]) -> tuple[int, int]:
    """(rows, columns) of one fragment of ``scope`` for MMA shape (m, n, k)."""
    m, n, k = shape
    return {Scope.WMMA_A: (m, k), Scope.WMMA_B: (k, n), Scope.WMMA_ACC: (m, n)}[scope]


class MmaFill(Stmt):
    """Set every element of fragment ``frag[index]`` to ``value``."""

    __slots__ = ("frag", "index", "value", "shape")

    def __init__(self, frag: Buffer, index: tuple[Expr, ...], value: float,
                 shape: tuple[int, int, int]):
        self.frag, self.index, self.value, self.shape = frag, tuple(index), float(value), shape

    def __reduce__(self) -> tuple:
        return MmaFill, (self.frag, self.index, self.value, self.shape)


class MmaLoad(Stmt):
    """Load fragment ``frag[index]`` from ``src``: element (r, c) of the fragment is
    ``src[offset + r*ldm + c]`` for layout "row", ``src[offset + c*ldm + r]`` for "col"."""

    __slots__ = ("frag", "index", "src", "offset", "ldm", "layout", "shape")

    def __init__(self, frag: Buffer, index: tuple[Expr, ...], src: Buffer, offset: Expr,
                 ldm: int, layout: str, shape: tuple[int, int, int]):
        assert layout in ("row", "col"), layout
        self.frag, self.index, self.src, self.offset = frag, tuple(index), src, offset
        self.ldm, self.layout, self.shape = int(ldm), layout, shape

    def __reduce__(self) -> tuple:
        return MmaLoad, (self.frag, self.index, self.src, self.offset, self.ldm, self.layout,
                         self.shape)


class MmaSync(Stmt):
    """``acc[acc_index] += a[a_index] @ b[b_index]`` on the tensor cores (float32
    accumulation)."""

    __slots__ = ("acc", "acc_index", "a", "a_index", "b", "b_index", "shape")

    def __init__(self, acc: Buffer, acc_index: tuple[Expr, ...], a: Buffer,
                 a_index: tuple[Expr, ...], b: Buffer, b_index: tuple[Expr, ...],
                 shape: tuple[int, int, int]):
        self.acc, self.acc_index = acc, tuple(acc_index)
        self.a, self.a_index, self.b, self.b_index = a, tuple(a_index), b, tuple(b_index)
        self.shape = shape

    def __reduce__(self) -> tuple:
        return MmaSync, (self.acc, self.acc_index, self.a, self.a_index, self.b, self.b_index,
                         self.shape)


class MmaStore(Stmt):
    """Store accumulator fragment ``frag[index]`` row-major: element (r, c) goes to
    ``dst[offset + r*ldm + c]``."""

    __slots__ = ("dst", "offset", "ldm", "frag", "index", "shape")

    def __init__(self, dst: Buffer, offset: Expr, ldm: int, frag: Buffer,
                 index: tuple[Expr, ...], shape: tuple[int, int, int]):
        self.dst, self.offset, self.ldm = dst, offset, int(ldm)
        self.frag, self.index, self.shape = frag, tuple(index), shape

    def __reduce__(self) -> tuple:
        return MmaStore, (self.dst, self.offset, self.ldm, self.frag, self.index, self.shape)


class AsyncCopy(Stmt):
    """One thread's ``cp.async`` of ``elems`` consecutive elements (4, 8 or 16 bytes) from
    ``src[src_offset]`` (global) to ``dst[dst_offset]`` (shared). Where ``valid`` is false
    nothing is read and the destination is zero-filled. The data may land any time until
    the thread's ``AsyncWait`` that covers the copy's group."""

    __slots__ = ("dst", "dst_offset", "src", "src_offset", "elems", "valid")

    def __init__(self, dst: Buffer, dst_offset: Expr, src: Buffer, src_offset: Expr,
                 elems: int, valid: Expr | None = None):
        self.dst, self.dst_offset, self.src, self.src_offset = dst, dst_offset, src, src_offset
        self.elems, self.valid = int(elems), valid

    def __reduce__(self) -> tuple:
        return AsyncCopy, (self.dst, self.dst_offset, self.src, self.src_offset, self.elems,
                           self.valid)


class AsyncCommit(Stmt):
    """Close the thread's current group of ``AsyncCopy`` (``cp.async.commit_group``)."""

    __slots__ = ()

    def __reduce__(self) -> tuple:
        return AsyncCommit, ()


class AsyncWait(Stmt):
    """Wait until at most ``pending`` of the thread's newest committed groups are still in
    flight (``cp.async.wait_group``); other threads see the data only after a barrier."""

    __slots__ = ("pending",)

    def __init__(self, pending: int):
        self.pending = int(pending)

    def __reduce__(self) -> tuple:
        return AsyncWait, (self.pending,)


# ---------------------------------------------------------------- Hopper (sm_90a)
# Warp-specialized tensor-core kernels: a producer thread copies tiles into shared memory
# with the Tensor Memory Accelerator (TMA), completing on mbarriers; consumer warpgroups
# (4 consecutive warps, the first a multiple of 4) wait on those barriers, multiply the
# tiles with asynchronous warpgroup MMAs (wgmma) into register accumulators, and arrive on
# a barrier that frees the stage for the producer.

WARPGROUP = 4 * WARP  # threads that issue one wgmma together
SWIZZLES = (0, 32, 64, 128)  # bytes of a TMA / wgmma shared-memory swizzle pattern


class TensorMap:
    """A TMA descriptor of global buffer ``buffer``: it copies boxes of ``box`` elements
    (one extent per dimension of the buffer, outermost first), taking every
    ``element_strides[d]``-th element along dimension d (a strided conv's input), written
    to shared memory row-major with a ``swizzle``-byte swizzle; coordinates outside the
    buffer (negative ones too) read zeros. The host encodes it at launch
    (``cuTensorMapEncodeTiled``) and the kernel takes it as a ``__grid_constant__``
    parameter. Compared by identity."""

    __slots__ = ("name", "buffer", "box", "swizzle", "element_strides")

    def __init__(self, name: str, buffer: Buffer, box: tuple[int, ...], swizzle: int,
                 element_strides: tuple[int, ...] | None = None):
        assert len(box) == len(buffer.shape), (buffer.name, box)
        assert swizzle in SWIZZLES, swizzle
        self.name, self.buffer, self.box, self.swizzle = name, buffer, tuple(box), int(swizzle)
        strides = (1,) * len(box) if element_strides is None else tuple(element_strides)
        assert len(strides) == len(box) and strides[-1] == 1, (buffer.name, strides)
        self.element_strides = strides

    def __reduce__(self) -> tuple:
        return TensorMap, (self.name, self.buffer, self.box, self.swizzle,
                           self.element_strides)

    @property
    def loaded(self) -> tuple[int, ...]:
        """Elements a copy brings along each dimension (the box over the strides)."""
        return tuple(-(-b // e) for b, e in zip(self.box, self.element_strides))

    @property
    def box_elems(self) -> int:
        """Elements a copy writes to shared memory."""
        return prod(self.loaded)

    def __repr__(self) -> str:
        return f"TensorMap({self.name}, {self.buffer.name}, box={self.box}, sw={self.swizzle})"


class TmaLoad(Stmt):
    """One thread's bulk tensor copy of ``tmap``'s box at element ``coords`` (per dimension
    of its buffer, outermost first; may lie partly outside it) into shared ``dst`` from
    element ``dst_offset`` on; the copy's bytes count as transactions on mbarrier
    ``bar[bar_index]``, whose phase completes once they have all landed."""

    __slots__ = ("dst", "dst_offset", "tmap", "coords", "bar", "bar_index")

    def __init__(self, dst: Buffer, dst_offset: Expr, tmap: TensorMap,
                 coords: tuple[Expr, ...], bar: Buffer, bar_index: Expr):
        assert len(coords) == len(tmap.box), (tmap.name, coords)
        self.dst, self.dst_offset, self.tmap, self.coords = dst, dst_offset, tmap, tuple(coords)
        self.bar, self.bar_index = bar, bar_index

    def __reduce__(self) -> tuple:
        return TmaLoad, (self.dst, self.dst_offset, self.tmap, self.coords, self.bar,
                         self.bar_index)


class MbarrierInit(Stmt):
    """One thread initialises mbarrier ``bar[index]`` to expect ``count`` arrivals per
    phase (and orders the init before the async proxy's use of it)."""

    __slots__ = ("bar", "index", "count")

    def __init__(self, bar: Buffer, index: Expr, count: int):
        self.bar, self.index, self.count = bar, index, int(count)

    def __reduce__(self) -> tuple:
        return MbarrierInit, (self.bar, self.index, self.count)


class MbarrierArrive(Stmt):
    """One thread arrives on mbarrier ``bar[index]``; with ``expect_bytes`` > 0 it also
    raises the phase's expected transaction bytes by that much (``arrive.expect_tx``), which
    the TMA copies completing on it count down."""

    __slots__ = ("bar", "index", "expect_bytes")

    def __init__(self, bar: Buffer, index: Expr, expect_bytes: int = 0):
        self.bar, self.index, self.expect_bytes = bar, index, int(expect_bytes)

    def __reduce__(self) -> tuple:
        return MbarrierArrive, (self.bar, self.index, self.expect_bytes)


class MbarrierWait(Stmt):
    """Wait until the phase of mbarrier ``bar[index]`` whose parity is ``parity`` (0 or 1)
    has completed: the barrier's current phase has the other parity."""

    __slots__ = ("bar", "index", "parity")

    def __init__(self, bar: Buffer, index: Expr, parity: Expr):
        self.bar, self.index, self.parity = bar, index, parity

    def __reduce__(self) -> tuple:
        return MbarrierWait, (self.bar, self.index, self.parity)


class SmemMatrix:
    """A wgmma operand in shared memory, as its matrix descriptor gives it: ``buffer`` from
    element ``offset`` on, ``major`` "k" (the reduction dimension contiguous) or "mn", a
    ``swizzle``-byte swizzle, and the leading/stride byte offsets of the canonical layout
    (K-major: ``sbo`` between groups of 8 rows; MN-major: ``lbo`` between 64-element
    blocks of M/N, ``sbo`` between groups of 8 rows of K)."""

    __slots__ = ("buffer", "offset", "major", "swizzle", "lbo", "sbo")

    def __init__(self, buffer: Buffer, offset: Expr, major: str, swizzle: int, lbo: int,
                 sbo: int):
        assert major in ("k", "mn"), major
        assert swizzle in SWIZZLES, swizzle
        self.buffer, self.offset, self.major = buffer, offset, major
        self.swizzle, self.lbo, self.sbo = int(swizzle), int(lbo), int(sbo)

    def __reduce__(self) -> tuple:
        return SmemMatrix, (self.buffer, self.offset, self.major, self.swizzle, self.lbo,
                            self.sbo)

    def __repr__(self) -> str:
        return (f"{self.buffer.name}[{self.offset!r}] {self.major}-major sw{self.swizzle} "
                f"lbo={self.lbo} sbo={self.sbo}")


class Wgmma(Stmt):
    """Warpgroup-collective, asynchronous ``acc[acc_index] += A @ B``: A 64 x 16 and B
    16 x ``n`` from shared memory, float32 accumulators in registers: ``acc[acc_index]``
    is the row of ``n / 2`` floats each thread holds (``wgmma_fragment`` places them). The
    registers are defined only after a ``WgmmaWait`` covering the statement's group."""

    __slots__ = ("acc", "acc_index", "a", "b", "n")

    def __init__(self, acc: Buffer, acc_index: tuple[Expr, ...], a: SmemMatrix,
                 b: SmemMatrix, n: int):
        assert len(acc_index) == len(acc.shape) - 1 and acc.shape[-1] == n // 2, (
            acc.name, acc_index, n)
        self.acc, self.acc_index, self.a, self.b, self.n = acc, tuple(acc_index), a, b, int(n)

    def __reduce__(self) -> tuple:
        return Wgmma, (self.acc, self.acc_index, self.a, self.b, self.n)


def wgmma_fragment(thread: int, reg: int) -> tuple[int, int]:
    """(row, column) of the accumulator element that register ``reg`` of warpgroup thread
    ``thread`` (0-127) holds, in a 64 x n wgmma tile."""
    warp, lane = thread // WARP, thread % WARP
    return (warp * 16 + lane // 4 + 8 * (reg % 4 // 2),
            reg // 4 * 8 + lane % 4 * 2 + reg % 2)


class WgmmaFence(Stmt):
    """``wgmma.fence``: order the warpgroup's register and shared-memory accesses before
    the wgmmas that follow."""

    __slots__ = ()

    def __reduce__(self) -> tuple:
        return WgmmaFence, ()


class WgmmaCommit(Stmt):
    """Close the warpgroup's current group of wgmmas."""

    __slots__ = ()

    def __reduce__(self) -> tuple:
        return WgmmaCommit, ()


class WgmmaWait(Stmt):
    """Wait until at most ``pending`` of the warpgroup's newest wgmma groups are in flight:
    the others' accumulators are defined and their shared operands free again."""

    __slots__ = ("pending",)

    def __init__(self, pending: int):
        self.pending = int(pending)

    def __reduce__(self) -> tuple:
        return WgmmaWait, (self.pending,)


class NamedSync(Stmt):
    """Barrier ``barrier`` (1-15; 0 is ``__syncthreads``) among ``threads`` threads of the
    block, a multiple of 32 (``bar.sync``): the consumer warpgroups meeting without the
    producer."""

    __slots__ = ("barrier", "threads")

    def __init__(self, barrier: int, threads: int):
        assert 1 <= barrier <= 15 and threads % WARP == 0, (barrier, threads)
        self.barrier, self.threads = int(barrier), int(threads)

    def __reduce__(self) -> tuple:
        return NamedSync, (self.barrier, self.threads)


class SetMaxNReg(Stmt):
    """Warpgroup-collective: raise (``increase``) or lower this warpgroup's registers per
    thread to ``count`` (``setmaxnreg``), so that the consumers get what the producer does
    not need."""

    __slots__ = ("count", "increase")

    def __init__(self, count: int, increase: bool):
        self.count, self.increase = int(count), bool(increase)

    def __reduce__(self) -> tuple:
        return SetMaxNReg, (self.count, self.increase)


# ---------------------------------------------------------------- global-memory ordering
# Blocks of one launch communicate only through these (split-K's partial tiles): a block
# writes, fences, then one thread counts its arrival atomically; the last to arrive reads
# what the others wrote.

class Fence(Stmt):
    """``__threadfence()``: the thread's global writes before it are visible device-wide
    before any of its later ones (an atomic after it publishes them; after an atomic, it
    orders the thread's later reads behind what that atomic observed)."""

    __slots__ = ()

    def __reduce__(self) -> tuple:
        return Fence, ()


class AtomicAdd(Stmt):
    """``result[result_index] = atomicAdd(&buffer[index], value)``: one thread adds
    ``value`` to a float32 element of global memory atomically; the old value goes to
    ``result`` (a float32 shared or local buffer)."""

    __slots__ = ("result", "result_index", "buffer", "index", "value")

    def __init__(self, result: Buffer, result_index: tuple[Expr, ...], buffer: Buffer,
                 index: tuple[Expr, ...], value: float):
        assert len(index) == len(buffer.shape), (buffer.name, index)
        assert len(result_index) == len(result.shape), (result.name, result_index)
        self.result, self.result_index = result, tuple(result_index)
        self.buffer, self.index, self.value = buffer, tuple(index), float(value)

    def __reduce__(self) -> tuple:
        return AtomicAdd, (self.result, self.result_index, self.buffer, self.index,
                           self.value)


@dataclass
class PrimFunc:
    """A lowered kernel: arguments (inputs, then the output), runtime-allocated workspaces
    (global temporaries, e.g. a packed weight or split-K's partial tiles and counters:
    allocated and zeroed once per loaded kernel, passed after the arguments), and the loop
    AST."""

    name: str
    args: tuple[Buffer, ...]
    body: Stmt
    workspaces: tuple[Buffer, ...] = ()
    attrs: dict = field(default_factory=dict)

    def __reduce__(self) -> tuple:
        return PrimFunc, (self.name, self.args, self.body, self.workspaces, self.attrs)

    def __str__(self) -> str:
        return format_func(self)


def walk_stmts(s: Stmt) -> Iterator[Stmt]:
    """Pre-order traversal of a statement tree."""
    stack = [s]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(reversed(x.children()))


# ---------------------------------------------------------------- text form
# What ``print(autotune.lower(...))`` shows; here, beside the nodes it prints.

def format_stmt(s: Stmt, indent: int = 0) -> list[str]:
    """Lines of ``s``, indented two spaces per level from ``indent``."""
    pad = "  " * indent
    if isinstance(s, Seq):
        return [line for c in s.stmts for line in format_stmt(c, indent)]
    if isinstance(s, For):
        tag = "" if s.kind is ForKind.SERIAL else f"  # {s.kind.value}"
        return [f"{pad}for {s.var.name} in 0..{s.extent}:{tag}", *format_stmt(s.body, indent + 1)]
    if isinstance(s, Allocate):
        b = s.buffer
        return [f"{pad}alloc {b.name}{list(b.shape)} {b.dtype} @{b.scope.value}",
                *format_stmt(s.body, indent)]
    if isinstance(s, IfThenElse):
        out = [f"{pad}if {s.cond!r}:", *format_stmt(s.then, indent + 1)]
        if s.else_ is not None:
            out += [f"{pad}else:", *format_stmt(s.else_, indent + 1)]
        return out
    return [f"{pad}{_leaf_text(s)}"]


def _leaf_text(s: Stmt) -> str:
    """The one line of a statement that holds no other."""
    if isinstance(s, Store):
        return f"{s.buffer.name}[{', '.join(map(repr, s.indices))}] = {s.value!r}"
    if isinstance(s, Sync):
        return "sync_threads()"
    if isinstance(s, MmaFill):
        return f"{_frag(s.frag, s.index)} = fill({s.value!r})"
    if isinstance(s, MmaLoad):
        return (f"{_frag(s.frag, s.index)} = mma_load({s.src.name}[{s.offset!r}], "
                f"ldm={s.ldm}, {s.layout}, shape={s.shape})")
    if isinstance(s, MmaSync):
        return (f"{_frag(s.acc, s.acc_index)} += mma({_frag(s.a, s.a_index)}, "
                f"{_frag(s.b, s.b_index)}, shape={s.shape})")
    if isinstance(s, MmaStore):
        return (f"mma_store({s.dst.name}[{s.offset!r}], ldm={s.ldm}, "
                f"{_frag(s.frag, s.index)})")
    if isinstance(s, AsyncCopy):
        cond = "" if s.valid is None else f" if {s.valid!r} else zeros"
        return (f"{s.dst.name}[{s.dst_offset!r}:+{s.elems}] = async_copy("
                f"{s.src.name}[{s.src_offset!r}:+{s.elems}]{cond})")
    if isinstance(s, AsyncCommit):
        return "async_commit()"
    if isinstance(s, AsyncWait):
        return f"async_wait({s.pending})"
    if isinstance(s, Fence):
        return "thread_fence()"
    if isinstance(s, AtomicAdd):
        return (f"{_frag(s.result, s.result_index)} = atomic_add("
                f"{_frag(s.buffer, s.index)}, {s.value!r})")
    return _hopper_text(s)


def _hopper_text(s: Stmt) -> str:
    if isinstance(s, TmaLoad):
        coords = ", ".join(map(repr, s.coords))
        return (f"{s.dst.name}[{s.dst_offset!r}:+{s.tmap.box_elems}] = tma_load("
                f"{s.tmap.name}[{coords}], barrier={_frag(s.bar, (s.bar_index,))})")
    if isinstance(s, MbarrierInit):
        return f"mbarrier_init({_frag(s.bar, (s.index,))}, count={s.count})"
    if isinstance(s, MbarrierArrive):
        tx = f", expect_bytes={s.expect_bytes}" if s.expect_bytes else ""
        return f"mbarrier_arrive({_frag(s.bar, (s.index,))}{tx})"
    if isinstance(s, MbarrierWait):
        return f"mbarrier_wait({_frag(s.bar, (s.index,))}, parity={s.parity!r})"
    if isinstance(s, Wgmma):
        return f"{_frag(s.acc, s.acc_index)} += wgmma(m64n{s.n}k16, {s.a!r}, {s.b!r})"
    if isinstance(s, WgmmaFence):
        return "wgmma_fence()"
    if isinstance(s, WgmmaCommit):
        return "wgmma_commit()"
    if isinstance(s, WgmmaWait):
        return f"wgmma_wait({s.pending})"
    if isinstance(s, SetMaxNReg):
        return f"set_max_nreg({s.count}, {'inc' if s.increase else 'dec'})"
    if isinstance(s, NamedSync):
        return f"sync_threads(barrier={s.barrier}, threads={s.threads})"
    raise TypeError(f"unknown statement {type(s).__name__}")


def _frag(b: Buffer, index: tuple[Expr, ...]) -> str:
    return f"{b.name}[{', '.join(map(repr, index))}]"


def format_func(f: PrimFunc) -> str:
    """``f`` as text: its signature, workspaces and body."""
    args = ", ".join(f"{b.name}: {b.dtype}{list(b.shape)}" for b in f.args)
    lines = [f"def {f.name}({args}):"]
    for w in f.workspaces:
        lines.append(f"  workspace {w.name}{list(w.shape)} {w.dtype}")
    lines += format_stmt(f.body, 1)
    return "\n".join(lines)
