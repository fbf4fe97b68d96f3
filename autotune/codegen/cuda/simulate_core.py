"""The core of the CUDA execution model (``simulate``): the lanes of a chunk of blocks, the
memory they see, and the checks of every plain access (bounds, poison, races) and barrier.

One numpy lane per thread; a value is uniform (a Python number) or one per lane. Each
buffer keeps, per element and barrier phase, the lowest and highest thread id that read and
wrote it, so two threads meeting on an element, one of them writing, is a race. The
statement compiler (``simulate_builder``) and the parts that run the warp-level, global
ordering and Hopper statements (``simulate_warp``, ``simulate_sync``, ``simulate_hopper``)
build on what is here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence, Union

import numpy as np

from autotune.codegen.cuda.passes import Launch
from autotune.codegen.cuda.simulate_error import CudaExecutionError
from autotune.codegen.cuda.simulate_hopper_state import HopperState
from autotune.ir.expr import Var
from autotune.ir.stmt import WARP, Buffer, Scope

if TYPE_CHECKING:
    from autotune.codegen.cuda.simulate_sync import Ordering
    from autotune.codegen.cuda.simulate_warp import WarpState

Value = Union[int, float, np.ndarray]  # a uniform value, or one per lane
Env = dict[Var, Value]
ExprFn = Callable[["Grid", Env, np.ndarray], Value]
StmtFn = Callable[["Grid", Env, np.ndarray], None]

_NONE = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Memory:
    """One buffer of the launch: values, which elements hold a written value, and who
    touched each element in the current phase (lowest and highest thread id)."""

    buffer: Buffer
    data: np.ndarray
    written: np.ndarray | None  # None: every element is defined (a kernel input)
    tracked: bool               # race tracking (shared and global; registers are private)
    wmin: np.ndarray
    wmax: np.ndarray
    rmin: np.ndarray
    rmax: np.ndarray

    @staticmethod
    def new(buffer: Buffer, data: np.ndarray, defined: bool, tracked: bool) -> "Memory":
        n = data.size if tracked else 0
        lo: np.ndarray = np.full(n, _NONE, np.int64)
        hi: np.ndarray = np.full(n, -1, np.int64)
        return Memory(buffer, data, None if defined else np.zeros(data.size, bool), tracked,
                       lo, hi.copy(), lo.copy(), hi.copy())

    def new_phase(self, rows: np.ndarray | slice) -> None:
        """Forget who touched the elements of ``rows`` (a barrier ordered them)."""
        size = self.buffer.size
        for arr, fill in ((self.wmin, _NONE), (self.wmax, -1), (self.rmin, _NONE),
                          (self.rmax, -1)):
            arr.reshape(-1, size)[rows] = fill


class Grid:
    """The lanes of one chunk of blocks and every buffer they see."""

    def __init__(self, launch: Launch, block_ids: np.ndarray, globals_: dict[Buffer, Memory],
                 shared: Sequence[Buffer], index_bits: int, order: Ordering | None = None):
        gx, gy, _ = launch.grid
        bx, by, _ = launch.block
        self.launch = launch
        self.threads = launch.threads
        self.blocks = blocks = len(block_ids)
        self.lanes = blocks * self.threads
        lane: np.ndarray = np.arange(self.lanes, dtype=np.int64)
        self.local_block: np.ndarray = lane // self.threads           # block within the chunk
        self.tid: np.ndarray = lane % self.threads                     # thread id within its block
        gblock: np.ndarray = block_ids[self.local_block]
        self.gtid = gblock * self.threads + self.tid       # thread id within the grid
        self.index: dict[tuple[str, int], np.ndarray] = {
            ("block", 0): gblock % gx, ("block", 1): gblock // gx % gy,
            ("block", 2): gblock // (gx * gy),
            ("thread", 0): self.tid % bx, ("thread", 1): self.tid // bx % by,
            ("thread", 2): self.tid // (bx * by)}
        self.memory: dict[Buffer, Memory] = dict(globals_)
        for b in shared:
            data: np.ndarray = np.zeros(blocks * b.size, np.float32)
            self.memory[b] = Memory.new(b, data, defined=False, tracked=True)
        self.int_max = (1 << (index_bits - 1)) - 1
        self.warps: WarpState | None = None  # warps and cp.async groups, made on first use
        self.order = order  # fences and atomics (None: the kernel has none)
        self.phase: np.ndarray = np.zeros(blocks, np.int64)  # barriers each block passed
        self.hopper: HopperState | None = None  # a warp-specialized kernel's own state

    def coords(self, lane: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(blockIdx, threadIdx) of ``lane``."""
        b = tuple(int(self.index[("block", d)][lane]) for d in range(3))
        t = tuple(int(self.index[("thread", d)][lane]) for d in range(3))
        return b, t  # type: ignore[return-value]

    def thread_of(self, scope: Scope, owner: int, lane: int
                  ) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """(blockIdx, threadIdx) of a thread id recorded by race tracking."""
        if scope is Scope.SHARED:  # a thread of ``lane``'s block
            lane = int(self.local_block[lane]) * self.threads + owner
            return self.coords(lane)
        block, tid = divmod(owner, self.threads)
        gx, gy, _ = self.launch.grid
        bx, by, _ = self.launch.block
        return ((block % gx, block // gx % gy, block // (gx * gy)),
                (tid % bx, tid // bx % by, tid // (bx * by)))

def barrier(g: Grid, mask: np.ndarray) -> None:
    """``__syncthreads()`` reached by the lanes of ``mask``: ``divergent_barrier`` unless a
    block's threads all reach it; their shared memory starts a new phase."""
    reached = mask.reshape(g.blocks, g.threads)
    count = reached.sum(axis=1)
    partial = np.nonzero((count > 0) & (count < g.threads))[0]
    if partial.size:
        blk = int(partial[0])
        lanes: np.ndarray = blk * g.threads + np.arange(g.threads)
        b, t_in = g.coords(int(lanes[np.argmax(reached[blk])]))
        _, t_out = g.coords(int(lanes[np.argmin(reached[blk])]))
        raise CudaExecutionError(
            "divergent_barrier",
            f"__syncthreads() reached by {int(count[blk])} of {g.threads} threads "
            f"of block {b}: thread {t_in} waits there, thread {t_out} never comes",
            block=b, thread=t_out, other_thread=t_in, statement="__syncthreads();")
    full = count == g.threads
    g.phase[full] += 1
    for m in g.memory.values():
        if m.buffer.scope is Scope.SHARED:
            m.new_phase(full)


def broadcast(v: Value, n: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(v), (n,))


def check_int(g: Grid, r: Value, mask: np.ndarray, what: str) -> None:
    if np.ndim(r) == 0:
        bad = not -g.int_max - 1 <= int(r) <= g.int_max  # type: ignore[arg-type]
        lane = int(np.argmax(mask)) if bad else 0
    else:
        arr = np.asarray(r)
        over = ((arr > g.int_max) | (arr < -g.int_max - 1)) & mask
        bad = bool(over.any())
        lane = int(np.argmax(over)) if bad else 0
    if bad:
        blk, thr = g.coords(lane)
        width = "int" if g.int_max < 2**31 else "long long"
        raise CudaExecutionError("int_overflow", f"{what} overflows {width} "
                                 f"(index arithmetic of the kernel)", block=blk, thread=thr)


def describe_lane(g: Grid, lane: int, warp: bool
         ) -> tuple[str, tuple[int, int, int], tuple[int, int, int], int | None]:
    """How errors name ``lane``'s thread, or its warp for a warp-collective statement:
    (text, blockIdx, threadIdx, warp)."""
    blk, thr = g.coords(lane)
    if not warp:
        return f"thread {thr} of block {blk}", blk, thr, None
    w = int(g.tid[lane]) // WARP
    return f"warp {w} of block {blk}", blk, thr, w


def check_access(g: Grid, mem: Memory, index: np.ndarray, lanes: np.ndarray, write: bool,
            text: str, warp: bool = False) -> np.ndarray:
    """Check one access of ``mem`` by ``lanes`` at ``index`` (bounds, cp.async data in
    flight, poison, races) and return the elements' positions in ``mem.data``. ``warp``:
    the access is a warp's collective one, ``lanes`` the warp's lane 0."""
    buf = mem.buffer
    index = index.astype(np.int64, copy=False)
    out = (index < 0) | (index >= buf.size)
    if out.any():
        k = int(np.argmax(out))
        who, blk, thr, w = describe_lane(g, int(lanes[k]), warp)
        verb = "writes" if write else "reads"
        raise CudaExecutionError(
            "out_of_bounds", f"{who} {verb} {buf.name}[{int(index[k])}] "
            f"outside its {buf.size} elements", buffer=buf.name, index=int(index[k]),
            block=blk, thread=thr, statement=text, warp=w)
    if buf.scope is Scope.SHARED:
        keys, owner = g.local_block[lanes] * buf.size + index, g.tid[lanes]
    elif buf.scope is Scope.LOCAL:
        keys, owner = lanes * buf.size + index, lanes
    else:
        keys, owner = index, g.gtid[lanes]
    if g.warps is not None and buf.scope is Scope.SHARED:
        g.warps.check_landed(g, mem, keys, lanes, write, text, warp)
    if g.hopper is not None:
        g.hopper.check_plain(mem, keys, lanes, write, text)
    if not write and mem.written is not None:
        unset = ~mem.written[keys]
        if unset.any():
            k = int(np.argmax(unset))
            who, blk, thr, w = describe_lane(g, int(lanes[k]), warp)
            place = {Scope.SHARED: "shared memory", Scope.LOCAL: "a register array"}.get(
                buf.scope, "global memory")
            raise CudaExecutionError(
                "uninitialized", f"{who} reads {buf.name}[{int(index[k])}] "
                f"({place}), which no thread wrote", buffer=buf.name, index=int(index[k]),
                block=blk, thread=thr, statement=text, warp=w)
    if mem.tracked:
        track_access(g, mem, keys, owner, lanes, index, write, text, warp)
    return keys


def track_access(g: Grid, mem: Memory, keys: np.ndarray, owner: np.ndarray, lanes: np.ndarray,
           index: np.ndarray, write: bool, text: str, warp: bool = False) -> None:
    """Record who touched ``keys`` in this phase; raise when two threads met on an element
    that one of them wrote."""
    lo, hi = (mem.wmin, mem.wmax) if write else (mem.rmin, mem.rmax)
    np.minimum.at(lo, keys, owner)
    np.maximum.at(hi, keys, owner)
    if write and g.order is not None:
        g.order.written(mem.buffer, keys)
    wlo, whi = mem.wmin[keys], mem.wmax[keys]
    first = np.minimum(wlo, mem.rmin[keys])
    last = np.maximum(whi, mem.rmax[keys])
    racy = (wlo <= whi) & (first != last)
    if not racy.any():
        return
    if not write and g.order is not None:  # published and acquired: ordered, no race
        racy &= ~g.order.ordered(g, mem, keys, owner, lanes)
        if not racy.any():
            return
    k = int(np.argmax(racy))
    lane = int(lanes[k])
    mine = int(owner[k])
    other = int(last[k]) if int(first[k]) == mine else int(first[k])
    me, blk, thr, w = describe_lane(g, lane, warp)
    oblk, othr = g.thread_of(mem.buffer.scope, other, lane)
    who = f"thread {othr}" + (f" of block {oblk}" if oblk != blk else "")
    phase = ("in the same barrier phase" if mem.buffer.scope is Scope.SHARED
             else "in one launch (no barrier orders global memory across blocks)"
             if g.order is None else "in one launch, and no fence and atomic published "
             "the write to the reader's block")
    verb = "writes" if write else "reads"
    raise CudaExecutionError(
        "race", f"{me} {verb} {mem.buffer.name}[{int(index[k])}], "
        f"which {who} also touched, one of them writing, {phase}",
        buffer=mem.buffer.name, index=int(index[k]), block=blk, thread=thr,
        other_thread=othr, other_block=oblk, statement=text, warp=w)
