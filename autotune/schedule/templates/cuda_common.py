"""Helpers shared by the CUDA templates: launch limits, cooperative shared-memory fills,
unrolling by an ``auto_unroll_max_step`` budget.

Spatial axes are tiled into four levels (block, vthread, thread, inner). The write-back
loops run block, thread, vthread, inner so that consecutive threads touch consecutive
addresses (index = block*BT + vthread*(T*I) + thread*I + inner) and the register
accumulator, attached at the innermost thread loop, stays dense.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Sequence

from autotune.ir.expr import FLOAT
from autotune.ir.stmt import ForKind
from autotune.ops.dtypes import element_bytes
from autotune.schedule.definitions import OpGraph
from autotune.schedule.schedule import Axis, Schedule, Stage
from autotune.target import CudaLimits, Target

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
MAX_VTHREADS = 8           # per block; more only bloats registers and code
UNROLL_STEPS = (0, 16, 64, 512)
FLOAT_BYTES = element_bytes(FLOAT)
HALF_BYTES = element_bytes("float16")  # bfloat16 too
SHARED_ALIGN = 16


def limits(target: Target) -> CudaLimits:
    if target.cuda is None:
        raise ValueError(f"target {target} is not a CUDA target")
    return target.cuda


def span(factors: Sequence[int]) -> int:
    """Elements of an axis one block covers: the product of the inner tile factors."""
    return prod(factors[1:])


def clamped_span(extent: int, inner: Sequence[int]) -> int:
    """Elements a block covers when ``extent`` is tiled by ``inner`` factors (outer to
    inner) the way lowering does it: a factor larger than what is left is clamped."""
    rest, total = extent, 1
    for f in reversed(inner):
        e = min(f, rest)
        total *= e
        rest = -(-rest // e)
    return total


@dataclass(frozen=True)
class BlockShape:
    """What a config asks of one thread block: threads (x, y, z), virtual threads, floats
    of each shared tile and local floats per thread (the register accumulator)."""

    threads: tuple[int, int, int]
    vthreads: int
    shared_tiles: tuple[int, ...]
    local_floats: int

    @property
    def shared_bytes(self) -> int:
        """Bytes of shared memory, each tile 16-byte aligned as codegen declares it."""
        return sum(shared_bytes(n) for n in self.shared_tiles)


def shared_bytes(floats: int) -> int:
    """Bytes a shared tile of ``floats`` takes (aligned to 16 for float4 access)."""
    return -(-floats * FLOAT_BYTES // SHARED_ALIGN) * SHARED_ALIGN


def launch_reason(lim: CudaLimits, shape: BlockShape) -> str | None:
    """Why a block of this shape breaks ``lim``, or None."""
    total = prod(shape.threads)
    if total > lim.max_threads_per_block:
        return f"{total} threads per block > limit {lim.max_threads_per_block}"
    for name, n, cap in zip("xyz", shape.threads, lim.max_block_dim):
        if n > cap:
            return f"{n} threads in {name} > limit {cap}"
    if shape.vthreads > MAX_VTHREADS:
        return f"{shape.vthreads} virtual threads > limit {MAX_VTHREADS}"
    shared = shape.shared_bytes
    if shared > lim.max_shared_per_block:
        return f"{shared} bytes of shared memory > limit {lim.max_shared_per_block}"
    # a register tile beyond the per-thread register file only spills: reject it up front
    if shape.local_floats > lim.regs_per_thread // 2:
        return (f"{shape.local_floats} accumulator registers per thread > "
                f"{lim.regs_per_thread // 2}")
    return None


def conv_caches(g: OpGraph) -> tuple[Schedule, Stage, Stage, Stage]:
    """The schedule of a (depthwise) convolution graph with its output accumulated in
    registers and its input (padding inlined into the fill) and weights staged in shared
    memory: ``(schedule, local, input_shared, weight_shared)``."""
    s = g.schedule()
    data, weight = g.inputs[0], g.inputs[1]
    local = s.cache_write(g.output, "local")
    d_sh = s.cache_read(g.pad or data, "shared", [local])
    w_sh = s.cache_read(weight, "shared", [local])
    if g.pad is not None:
        s[g.pad].compute_inline()
    return s, local, d_sh, w_sh


def cooperative_fill(st: Stage, threads: Sequence[int]) -> None:
    """Fuse a shared-memory fill stage's axes and spread the result over the block's threads
    (``threads`` is (x, y, z)); consecutive threadIdx.x read consecutive addresses."""
    fused = st.fuse(*st.axis) if len(st.axis) > 1 else st.axis[0]
    dims = [(t, n) for t, n in zip(THREAD_TAGS, threads) if n > 1]
    if not dims:
        return
    _, inner = st.split(fused, factor=prod(n for _, n in dims))
    # peel thread dims from the inside out: x varies fastest
    for tag, n in dims[:-1]:
        inner, tx = st.split(inner, factor=n)
        st.bind(tx, tag)
    st.bind(inner, dims[-1][0])


def unroll_inner(st: Stage, axes: Sequence[Axis], extents: Sequence[int], max_step: int) -> None:
    """Unroll the innermost of ``axes`` (outer to inner) while the product of their extents
    stays within ``max_step``; an already annotated axis is left alone."""
    total = 1
    for a, n in reversed(list(zip(axes, extents))):
        total *= n
        if total > max_step:
            return
        if a not in st.kinds and n > 1:
            st.annotate(a, ForKind.UNROLLED)
