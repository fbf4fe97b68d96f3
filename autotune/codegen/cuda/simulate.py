"""An execution model of the CUDA kernels we generate, for machines without a GPU.

It runs the kernel body after every CUDA pass (``compiler.prepare_kernel``: the statements
the emitter prints one for one, with the emitter's own index flattening, C division and
index width) for every thread of the grid, in lockstep on numpy arrays: a lane per thread,
an ``if`` a mask, a block's threads one barrier phase at a time. Where a GPU would silently
compute garbage it raises ``CudaExecutionError``:

- ``uninitialized``: a read of shared memory, a register array, or the output that no
  thread wrote (shared memory and registers start as poison);
- ``race``: an element written by one thread and read or written by another in the same
  barrier phase (shared memory), or anywhere in the launch (global memory: our kernels
  never communicate through it);
- ``out_of_bounds``: an index outside its buffer;
- ``divergent_barrier``: a ``__syncthreads()`` that only some threads of a block reach;
- ``int_overflow`` / ``division_by_zero``: index arithmetic a 32-bit ``int`` cannot hold,
  or a division by zero;
- the tensor-core and ``cp.async`` statements' own kinds, ``divergent_warp``,
  ``nonuniform_warp``, ``misaligned``, ``async_pending`` and ``invalid_statement`` (see
  ``simulate_warp``, which runs them);
- ``counter_not_reset``, and the exception to the global ``race``: a read of what another
  block wrote and published by a fence and an atomic the reader's block acquired (see
  ``simulate_sync``, which runs fences and atomics);
- the Hopper statements' kinds (TMA, mbarriers, wgmma, setmaxnreg: ``simulate_hopper``).

A kernel with Hopper statements runs each warpgroup (the same one of every block in the
chunk) as a coroutine of its own, switching where one waits on an mbarrier
(``simulate_roles``): its producer and consumers meet only there. A ``__syncthreads()``
then waits for every warpgroup.

Blocks run in chunks, each chunk's in lockstep, in index order or in a given order (so the
block that arrives last at a split-K counter need not be the highest one). Workspaces may
be passed in (``scratch``) to keep their contents from one launch to the next, as a loaded
kernel does.

float16 and bfloat16 buffers arrive and leave in storage form (``ops.dtypes``); inside, the
model holds their exact values as float32 and rounds each store into them.
"""
from __future__ import annotations

from functools import partial
from math import prod
from typing import Mapping, Sequence

import numpy as np

from autotune.codegen.cuda.hopper import HOPPER_STMTS
from autotune.codegen.cuda.passes import Launch, shared_buffers
from autotune.codegen.cuda.semantics import index_bits, written_buffers
from autotune.codegen.cuda.simulate_builder import ClosureBuilder, Handler
from autotune.codegen.cuda.simulate_core import Grid, Memory, StmtFn, barrier
from autotune.codegen.cuda.simulate_error import CudaExecutionError
from autotune.codegen.cuda.simulate_hopper import hopper_stmt
from autotune.codegen.cuda.simulate_hopper_state import HopperPlan, HopperState
from autotune.codegen.cuda.simulate_sync import (
    SYNC_HANDLERS,
    Ordering,
    check_counters,
    counters_of,
    uses_ordering,
)
from autotune.codegen.cuda.simulate_warp import WARP_HANDLERS
from autotune.ir.expr import HALF_DTYPES
from autotune.ir.stmt import Buffer, PrimFunc, Stmt
from autotune.ops.dtypes import to_float32, to_storage

__all__ = ["CudaExecutionError", "HANDLERS", "run_kernel"]

MAX_LANES = 1 << 15  # threads simulated at once (blocks are run in chunks of this size)
# Hopper kernels keep per-element records of their async shared memory: smaller chunks
HOPPER_MAX_LANES = 1 << 12
# what runs each statement the closure builder does not run itself
HANDLERS: Mapping[type, Handler] = {
    **WARP_HANDLERS, **SYNC_HANDLERS, **dict.fromkeys(HOPPER_STMTS, hopper_stmt)}


def run_kernel(func: PrimFunc, body: Stmt, launch: Launch, arrays: Sequence[np.ndarray],
               max_lanes: int = MAX_LANES, *, block_order: Sequence[int] | None = None,
               scratch: Sequence[np.ndarray] | None = None) -> None:
    """Run a prepared kernel body (``compiler.prepare_kernel``) with ``launch`` on numpy
    arrays (``func.args`` order: inputs, then the output, which is written in place).
    ``block_order``: the linear block ids in the order they run (default: ascending).
    ``scratch``: one float32 array per workspace, read and updated in place (default: a
    zeroed one per call)."""
    if len(arrays) != len(func.args):
        raise ValueError(f"{func.name} takes {len(func.args)} arrays, got {len(arrays)}")
    program = ClosureBuilder(func, body, HANDLERS).visit(body)
    globals_ = _global_memory(func, body, arrays, scratch)
    shared = list(dict.fromkeys(shared_buffers(func.body)))
    order = _block_order(prod(launch.grid), block_order)
    counters = counters_of(body)
    ordering = Ordering(globals_, counters) if uses_ordering(body) else None
    plan = HopperPlan.of(func, body)
    if plan is not None:
        max_lanes = min(max_lanes, HOPPER_MAX_LANES)
    per_chunk = max(1, max_lanes // launch.threads)
    bits = index_bits(func)
    for first in range(0, len(order), per_chunk):
        grid = Grid(launch, order[first:first + per_chunk], globals_, shared, bits, ordering)
        if plan is None:
            program(grid, {}, np.ones(grid.lanes, bool))
            continue
        # warpgroups synchronise through mbarriers: each runs as a coroutine of its own
        grid.hopper = HopperState(plan, grid)
        grid.hopper.run(partial(_run_lanes, program, grid), partial(barrier, grid))
    check_counters(globals_, counters)
    out, out_buf = arrays[-1], func.args[-1]
    mem = globals_[out_buf]
    data = to_storage(mem.data, out_buf.dtype) if out_buf.dtype in HALF_DTYPES else mem.data
    out[...] = data.reshape(out.shape).astype(out.dtype)


def _global_memory(func: PrimFunc, body: Stmt, arrays: Sequence[np.ndarray],
                   scratch: Sequence[np.ndarray] | None) -> dict[Buffer, Memory]:
    """The launch's global memory: the arguments (half ones widened; those the kernel
    writes tracked and, but for their given values, poison) and the workspaces."""
    stored = written_buffers(body)  # by Store, MmaStore or AsyncCopy
    globals_: dict[Buffer, Memory] = {}
    for b, a in zip(func.args, arrays):
        if a.size != b.size:
            raise ValueError(f"{b.name}: {a.size} elements given, the kernel takes {b.size}")
        data = np.array(to_float32(np.asarray(a), b.dtype) if b.dtype in HALF_DTYPES else a,
                        dtype=np.float32).reshape(-1)
        globals_[b] = Memory.new(b, data, defined=b not in stored, tracked=b in stored)
    if scratch is None:
        scratch = [np.zeros(w.size, np.float32) for w in func.workspaces]
    if len(scratch) != len(func.workspaces):
        raise ValueError(f"{func.name} has {len(func.workspaces)} workspaces, "
                         f"{len(scratch)} scratch arrays given")
    for w, data in zip(func.workspaces, scratch):
        if data.dtype != np.float32 or data.size != w.size:
            raise ValueError(f"{w.name}: scratch must be {w.size} float32 elements")
        # (a workspace read before this launch wrote it is still an uninitialized read)
        globals_[w] = Memory.new(w, data.reshape(-1), defined=False, tracked=True)
    return globals_


def _block_order(blocks: int, block_order: Sequence[int] | None) -> np.ndarray:
    order: np.ndarray = (np.arange(blocks, dtype=np.int64) if block_order is None
                         else np.asarray(block_order, dtype=np.int64))
    if sorted(order.tolist()) != list(range(blocks)):
        raise ValueError(f"block_order must be a permutation of the {blocks} block ids")
    return order


def _run_lanes(program: StmtFn, g: Grid, mask: np.ndarray) -> None:
    program(g, {}, mask)
