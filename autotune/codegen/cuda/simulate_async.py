"""Shared memory that TMA copies fill and wgmma reads (the async proxy), and wgmma's
register accumulators, in the execution model (``simulate_hopper``).

Per element of such a buffer: the copy that last filled it (its barrier slot, phase and
swizzle; or that a thread's store wrote it) and, per warpgroup of the block, the newest
wgmma group that read it. A reader must know the filling phase completed; a writer must
know every reader's group retired and was released to it (see ``simulate_mbarrier``).

Per accumulator register: the wgmma group that last wrote it, and whether a thread's store
wrote it after the warpgroup's last ``wgmma.fence``. Per thread: wgmma groups committed and
retired (its own ``wgmma.wait_group``).
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from autotune.codegen.cuda.simulate_error import CudaExecutionError
from autotune.codegen.cuda.simulate_mbarrier import Mbarriers
from autotune.ir.stmt import Buffer

NONE = -1
PLAIN = -2  # the fill of an element a thread's store wrote

# (kind, message, lane, buffer, index): the statement layer's error
Fail = Callable[[str, str, int, Buffer, int], CudaExecutionError]


class AsyncShared:
    """Fills and readers of the async-proxy shared buffers of one chunk of blocks."""

    def __init__(self, buffers: Sequence[Buffer], blocks: int, warpgroups: int, fail: Fail):
        self.fill: dict[Buffer, np.ndarray] = {
            b: np.full(blocks * b.size, NONE, np.int64) for b in buffers}
        self.readers: dict[Buffer, np.ndarray] = {
            b: np.full((blocks * b.size, warpgroups), NONE, np.int64) for b in buffers}
        self.fail = fail
        # per fill id: barrier slot, phase, swizzle
        self._table: np.ndarray = np.zeros((3, 64), np.int64)
        self._n = 0

    def new_fills(self, slots: np.ndarray, phases: np.ndarray, swizzle: int) -> np.ndarray:
        """Ids of copies completing on ``slots`` in ``phases``, written ``swizzle``d."""
        n = len(slots)
        while self._n + n > self._table.shape[1]:
            self._table = np.concatenate([self._table, np.zeros_like(self._table)], axis=1)
        ids = np.arange(self._n, self._n + n)
        self._table[:, ids] = np.stack([slots, phases, np.full(n, swizzle)])
        self._n += n
        return ids

    # ------------------------------------------------------------------ reads
    def check_read(self, buf: Buffer, keys: np.ndarray, readers: np.ndarray,
                   bars: Mbarriers, blocks: np.ndarray, swizzle: int | None) -> None:
        """Reads of ``keys`` (instances x elements) by the lanes ``readers`` (instances x
        lanes; all of an instance's lanes must see each fill), in ``blocks`` (per
        instance). ``swizzle``: the descriptor's, which the fills must share (None for a
        thread's load)."""
        fills = self.fill[buf][keys]
        plain = fills == PLAIN
        if swizzle is not None and plain.any():
            w, e = np.argwhere(plain)[0]
            raise self.fail("invalid_statement", f"reads {buf.name}"
                            f"[{self._index(buf, keys[w, e])}] through a wgmma descriptor, "
                            "but a thread's store wrote it: "
                            "stores reach the async proxy only through fence.proxy.async, "
                            "which the loop IR does not have", int(readers[w, 0]), buf,
                            self._index(buf, keys[w, e]))
        filled = fills >= 0
        if swizzle is not None:
            wrong = filled & (self._table[2, np.where(filled, fills, 0)] != swizzle)
            if wrong.any():
                w, e = np.argwhere(wrong)[0]
                raise self.fail("swizzle_mismatch", f"reads {buf.name}"
                                f"[{self._index(buf, keys[w, e])}] through a descriptor with a "
                                f"{swizzle}-byte swizzle, but a TMA copy wrote it with a "
                                f"{int(self._table[2, fills[w, e]])}-byte swizzle",
                                int(readers[w, 0]), buf, self._index(buf, keys[w, e]))
        inst = np.broadcast_to(np.arange(len(keys))[:, None], fills.shape)
        pairs = np.unique(np.stack([inst[filled], fills[filled]]), axis=1)
        if not pairs.size:
            return
        slot, phase = self._table[0, pairs[1]], self._table[1, pairs[1]]
        lanes = readers[pairs[0]]
        ok = bars.know[lanes, slot[:, None]] > phase[:, None]
        if ok.all():
            return
        p, j = np.argwhere(~ok)[0]
        lane, s, ph = int(lanes[p, j]), int(slot[p]), int(phase[p])
        e = int(np.argmax(fills[pairs[0, p]] == pairs[1, p]))
        index = self._index(buf, keys[pairs[0, p], e])
        done = int(bars.done[blocks[pairs[0, p]], s])
        state = ("has not completed" if done <= ph else
                 "completed, but the thread has not waited on it")
        raise self.fail("stage_not_ready", f"reads {buf.name}[{index}], which a TMA copy "
                        f"fills in phase {ph} of {bars.names[s]}; that phase {state} (it last "
                        f"saw phase {int(bars.own[lane, s])})", lane, buf, index)

    def record_read(self, buf: Buffer, keys: np.ndarray, warpgroup: np.ndarray,
                    group: np.ndarray) -> None:
        """A wgmma of ``group`` by ``warpgroup`` (per instance) read ``keys``."""
        self.readers[buf][keys, warpgroup[:, None]] = group[:, None]

    # ------------------------------------------------------------------ writes
    def check_write(self, buf: Buffer, keys: np.ndarray, lanes: np.ndarray, bars: Mbarriers,
                    retired: Callable[[int, int], int], blocks: np.ndarray) -> None:
        """``stage_in_use`` where lane ``lanes[i]`` overwrites ``keys[i]`` (in block
        ``blocks[i]``) that a wgmma read, unless the writer knows that wgmma's group
        retired (``retired(block, warpgroup)``: groups its warpgroup retired)."""
        groups = self.readers[buf][keys]
        if not (groups >= 0).any():
            return
        known = bars.know[lanes][:, bars.slots:bars.slots + groups.shape[1]]
        bad = (groups >= 0) & (known <= groups)
        if not bad.any():
            return
        i, wg = np.argwhere(bad)[0]
        group, index = int(groups[i, wg]), self._index(buf, keys[i])
        if retired(int(blocks[i]), int(wg)) <= group:
            why = "a wgmma that has not retired (no wgmma.wait_group covered it)"
        else:
            why = ("a wgmma that retired, but no arrival of its warpgroup after that "
                   "completed a barrier phase the writer waited on")
        raise self.fail("stage_in_use", f"overwrites {buf.name}[{index}] while it is in use: "
                        f"warpgroup {int(wg)}'s wgmma group {group} read it, {why}",
                        int(lanes[i]), buf, index)

    def record_fill(self, buf: Buffer, keys: np.ndarray, fills: np.ndarray) -> None:
        self.fill[buf][keys] = fills
        self.readers[buf][keys] = NONE

    def _index(self, buf: Buffer, key: np.ndarray | int) -> int:
        return int(key) % buf.size


class Accumulators:
    """wgmma's register accumulators and each thread's wgmma groups, for one chunk."""

    def __init__(self, buffers: Sequence[Buffer], lanes: int):
        self.group: dict[Buffer, np.ndarray] = {
            b: np.full(lanes * b.size, NONE, np.int64) for b in buffers}
        self.unfenced: dict[Buffer, np.ndarray] = {
            b: np.zeros(lanes * b.size, bool) for b in buffers}
        self.committed: np.ndarray = np.zeros(lanes, np.int64)
        self.retired: np.ndarray = np.zeros(lanes, np.int64)

    def allocated(self, buf: Buffer, lanes: np.ndarray) -> None:
        if buf in self.group:
            self.group[buf].reshape(-1, buf.size)[lanes] = NONE
            self.unfenced[buf].reshape(-1, buf.size)[lanes] = False

    def pending(self, buf: Buffer, keys: np.ndarray, lanes: np.ndarray) -> np.ndarray:
        """Which registers ``keys`` (of ``lanes``) a wgmma in flight is still writing."""
        group = self.group[buf][keys]
        return (group >= 0) & (group >= self.retired[lanes])

    def fence(self, lanes: np.ndarray) -> None:
        for b, flags in self.unfenced.items():
            flags.reshape(-1, b.size)[lanes] = False

    def wait(self, lanes: np.ndarray, pending: int) -> None:
        self.retired[lanes] = np.maximum(self.retired[lanes], self.committed[lanes] - pending)
