"""Blocks that talk through global memory in the CUDA execution model (``simulate``): the
``Fence`` and ``AtomicAdd`` statements, and the order they give (split-K's partial tiles).

A global write is *published* once its thread fences after it and then an atomic of its
block, in a later barrier phase (or by the writer itself), counts on a counter element. A
thread of another block may read it only after its own block *acquired* that counter: one
of its threads did an atomic on it that came later, then fenced, and the reader is that
thread or reads in a later barrier phase. Any other read of an element another thread wrote
in the launch stays a ``race`` (a reduction that reads a slice no fence published). Atomics
run one thread at a time, in lane order (the model's block order); they never race with
each other. Counters must be back to 0 when the launch ends (``counter_not_reset``): the
next launch starts from them without a memset.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from autotune.codegen.cuda.semantics import flat_index
from autotune.codegen.cuda.simulate_builder import ClosureBuilder, Handler
from autotune.codegen.cuda.simulate_core import (
    Env,
    Grid,
    Memory,
    StmtFn,
    broadcast,
    describe_lane,
)
from autotune.codegen.cuda.simulate_error import CudaExecutionError
from autotune.ir.stmt import AtomicAdd, Buffer, Fence, Scope, Stmt, format_stmt, walk_stmts

_NONE = -1


def uses_ordering(body: Stmt) -> bool:
    """Whether ``body`` has fences or atomics (only then is the ordering state kept)."""
    return any(isinstance(s, (Fence, AtomicAdd)) for s in walk_stmts(body))


def counters_of(body: Stmt) -> list[Buffer]:
    """The buffers atomics count on."""
    return list(dict.fromkeys(s.buffer for s in walk_stmts(body) if isinstance(s, AtomicAdd)))


@dataclass
class _Elements:
    """Per element of one tracked global buffer: the barrier phase of the fence that covered
    its last write (-1: none yet), and the counter and clock its publication came with."""

    fence_phase: np.ndarray
    counter: np.ndarray
    time: np.ndarray


class Ordering:
    """The launch's atomic clock, what each element's publication is, and what each block
    acquired; shared by every chunk of blocks."""

    def __init__(self, globals_: dict[Buffer, Memory], counters: list[Buffer]):
        self.clock = 0
        self.counters = {b: i for i, b in enumerate(counters)}
        self.elements = {
            b: _Elements(np.full(m.data.size, _NONE, np.int64),
                         np.full(m.data.size, _NONE, np.int64),
                         np.zeros(m.data.size, np.int64))
            for b, m in globals_.items() if m.tracked and b not in self.counters}
        # per block (linear id): {counter key: (clock, barrier phase, acquiring thread)}
        self.acquired: dict[int, dict[int, tuple[int, int, int]]] = {}
        # per thread (grid id): atomics it did and has not fenced yet (key, clock)
        self.pending: dict[int, list[tuple[int, int]]] = {}
        # per block: fenced writes no atomic published yet (buffer, elements, writers)
        self.fenced: dict[int, list[tuple[Buffer, np.ndarray, np.ndarray]]] = {}

    def key(self, counter: Buffer, index: int) -> int:
        return self.counters[counter] * (1 << 40) + index

    def written(self, buf: Buffer, keys: np.ndarray) -> None:
        """A plain write: the element's earlier fence and publication no longer cover it."""
        el = self.elements.get(buf)
        if el is not None:
            el.fence_phase[keys] = _NONE
            el.counter[keys] = _NONE

    def fence(self, g: Grid, lanes: np.ndarray) -> None:
        """``lanes`` fence: their unfenced global writes are covered (at their block's
        current barrier phase), and their pending atomics acquire for their blocks."""
        gtids = g.gtid[lanes]
        sort = np.argsort(gtids)
        ids, phases = gtids[sort], g.phase[g.local_block[lanes]][sort]
        for buf, el in self.elements.items():
            mem = g.memory[buf]
            mine = (mem.wmin == mem.wmax) & np.isin(mem.wmin, ids) & (el.fence_phase < 0)
            if not mine.any():
                continue
            at = np.nonzero(mine)[0]
            writers = mem.wmin[at]
            el.fence_phase[at] = phases[np.searchsorted(ids, writers)]
            blocks = writers // g.threads
            for b in np.unique(blocks).tolist():
                sel = blocks == b
                self.fenced.setdefault(b, []).append((buf, at[sel], writers[sel]))
        for lane, gtid in zip(lanes.tolist(), gtids.tolist()):
            for key, time in self.pending.pop(gtid, []):
                block = gtid // g.threads
                phase = int(g.phase[g.local_block[lane]])
                self.acquired.setdefault(block, {})[key] = (time, phase, gtid)

    def atomic(self, g: Grid, lane: int, key: int) -> None:
        """Thread ``lane``'s atomic on counter ``key``: it publishes its block's fenced
        writes (fenced in an earlier phase, or by this thread) and will acquire the
        counter at its next fence."""
        self.clock += 1
        gtid = int(g.gtid[lane])
        block = gtid // g.threads
        phase = int(g.phase[g.local_block[lane]])
        later = []  # fenced in this phase by other threads: not ordered before this atomic
        for buf, at, writers in self.fenced.pop(block, []):
            el, mem = self.elements[buf], g.memory[buf]
            # still the write that was fenced, and not published yet
            live = (el.fence_phase[at] >= 0) & (el.counter[at] < 0) & \
                (mem.wmin[at] == writers) & (mem.wmax[at] == writers)
            ordered = live & ((el.fence_phase[at] < phase) | (writers == gtid))
            el.counter[at[ordered]] = key
            el.time[at[ordered]] = self.clock
            rest = live & ~ordered
            if rest.any():
                later.append((buf, at[rest], writers[rest]))
        if later:
            self.fenced[block] = later
        self.pending.setdefault(gtid, []).append((key, self.clock))

    def ordered(self, g: Grid, mem: Memory, keys: np.ndarray, owner: np.ndarray,
                lanes: np.ndarray) -> np.ndarray:
        """Which reads (of ``keys`` by threads ``owner``) an acquire orders after the
        single write of their element."""
        el = self.elements.get(mem.buffer)
        out: np.ndarray = np.zeros(keys.size, bool)
        if el is None or mem.buffer.scope is not Scope.GLOBAL:
            return out
        single = mem.wmin[keys] == mem.wmax[keys]
        for k in np.nonzero(single & (el.counter[keys] >= 0))[0].tolist():
            block = int(owner[k]) // g.threads
            got = self.acquired.get(block, {}).get(int(el.counter[keys[k]]))
            if got is None or got[0] < int(el.time[keys[k]]):
                continue
            phase = int(g.phase[g.local_block[lanes[k]]])
            out[k] = got[2] == int(owner[k]) or phase > got[1]
        return out


def sync_stmt(c: ClosureBuilder, s: Stmt) -> StmtFn:
    """The closure that runs one fence or atomic."""
    if isinstance(s, AtomicAdd):
        return _atomic(c, s)
    assert isinstance(s, Fence), s

    def fence(g: Grid, env: Env, mask: np.ndarray) -> None:
        if g.order is not None:
            g.order.fence(g, np.nonzero(mask)[0])
    return fence


def _atomic(c: ClosureBuilder, s: AtomicAdd) -> StmtFn:
    """One thread at a time, in lane order: the old value to ``result`` (a plain write of
    the thread), the counter element incremented."""
    text = format_stmt(s)[0].strip()
    if s.buffer.scope is not Scope.GLOBAL or s.buffer.dtype != "float32":
        raise CudaExecutionError("invalid_statement", f"{s.buffer.name}: atomicAdd here "
                                 "counts on float32 global memory", buffer=s.buffer.name,
                                 statement=text)
    index = c.expr(flat_index(s.buffer, s.index, c.ext))
    store = c.stmt_store(s.result, s.result_index, text)
    buf, value = s.buffer, float(s.value)

    def atomic(g: Grid, env: Env, mask: np.ndarray) -> None:
        lanes = np.nonzero(mask)[0]
        if not lanes.size:
            return
        mem = g.memory[buf]
        at = broadcast(index(g, env, mask), g.lanes)[lanes].astype(np.int64)
        bad = (at < 0) | (at >= buf.size)
        if bad.any():
            k = int(np.argmax(bad))
            who, blk, thr, _ = describe_lane(g, int(lanes[k]), False)
            raise CudaExecutionError(
                "out_of_bounds", f"{who} atomically adds to {buf.name}[{int(at[k])}] outside "
                f"its {buf.size} elements", buffer=buf.name, index=int(at[k]), block=blk,
                thread=thr, statement=text)
        old: np.ndarray = np.zeros(g.lanes, np.float32)
        for lane, i in zip(lanes.tolist(), at.tolist()):
            old[lane] = mem.data[i]
            mem.data[i] += value
            if mem.written is not None:
                mem.written[i] = True
            if g.order is not None:
                g.order.atomic(g, lane, g.order.key(buf, i))
        store(g, env, mask, old)
    return atomic


def check_counters(globals_: dict[Buffer, Memory], counters: list[Buffer]) -> None:
    """``counter_not_reset`` when a counter does not end the launch at 0."""
    for b in counters:
        data = globals_[b].data
        left = np.nonzero(data != 0)[0]
        if left.size:
            i = int(left[0])
            raise CudaExecutionError(
                "counter_not_reset", f"{b.name}[{i}] is {float(data[i])!r} when the launch "
                f"ends ({left.size} of {b.size} counters not 0): the next launch, which "
                "reuses the workspace without a memset, would count from there",
                buffer=b.name, index=i)


SYNC_HANDLERS: dict[type, Handler] = {Fence: sync_stmt, AtomicAdd: sync_stmt}
