"""The Hopper part of the execution model's state for one chunk of blocks, and its seam with
the model's core (``simulate``): the core calls ``HopperState``'s hooks on every plain
access (``check_plain``), register allocation (``allocated``) and ``__syncthreads()``
(``sync``), and runs the chunk through ``run``; the statements (``simulate_hopper``,
``simulate_wgmma``) see the core only as the ``Core`` and ``Lanes`` protocols below.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from autotune.codegen.cuda.hopper import HOPPER_STMTS
from autotune.codegen.cuda.passes import dynamic_shared_layout
from autotune.codegen.cuda.semantics import MBARRIER_STMTS
from autotune.codegen.cuda.simulate_async import PLAIN, Accumulators, AsyncShared
from autotune.codegen.cuda.simulate_error import CudaExecutionError
from autotune.codegen.cuda.simulate_mbarrier import Mbarriers
from autotune.codegen.cuda.simulate_roles import Blocked, Roles, Stuck
from autotune.ir.expr import Expr, Var
from autotune.ir.stmt import WARP, WARPGROUP, Buffer, PrimFunc, Stmt, TmaLoad, Wgmma, walk_stmts

REG_FILE = 65536       # 32-bit registers of a multiprocessor (a block has them all)
MAX_THREAD_REGS = 255  # per thread at launch


class MemoryView(Protocol):
    """One buffer of the launch, as the core holds it."""

    @property
    def buffer(self) -> Buffer: ...
    @property
    def data(self) -> np.ndarray: ...
    @property
    def written(self) -> np.ndarray | None: ...
    def new_phase(self, rows: np.ndarray) -> None: ...


class Lanes(Protocol):
    """A chunk of blocks, one lane per thread, as the core runs it."""

    lanes: int
    blocks: int
    threads: int
    tid: np.ndarray
    local_block: np.ndarray
    phase: np.ndarray  # barriers each block passed (what orders fences before an atomic)

    @property
    def memory(self) -> Mapping[Buffer, MemoryView]: ...
    @property
    def hopper(self) -> HopperState | None: ...
    def coords(self, lane: int) -> tuple[tuple[int, int, int], tuple[int, int, int]]: ...


class Core(Protocol):
    """The core's statement compiler, as the Hopper statements use it."""

    func: PrimFunc
    context: str

    @property
    def ext(self) -> dict[Var, int]: ...
    def expr(self, e: Expr) -> Callable[..., Any]: ...
    def access(self, g: Any, mem: Any, index: np.ndarray, lanes: np.ndarray, write: bool,
               text: str) -> np.ndarray: ...


@dataclass(frozen=True)
class HopperPlan:
    """What the model knows of a kernel's Hopper statements before running it: its mbarrier
    buffers, the shared buffers TMA fills or wgmma reads with their byte offsets in the
    dynamic shared block (the emitter aligns that block and them to 1024 bytes), and the
    wgmma accumulators."""

    barriers: tuple[Buffer, ...]
    base: Mapping[Buffer, int]
    accumulators: tuple[Buffer, ...]

    @staticmethod
    def of(func: PrimFunc, body: Stmt) -> HopperPlan | None:
        """The plan of ``func``'s prepared ``body``; None when it has no Hopper statement."""
        stmts = [s for s in walk_stmts(body) if isinstance(s, HOPPER_STMTS)]
        if not stmts:
            return None
        offsets, _ = dynamic_shared_layout(func.body)  # the emitter's layout
        async_bufs: list[Buffer] = []
        for s in stmts:
            if isinstance(s, TmaLoad):
                async_bufs.append(s.dst)
            elif isinstance(s, Wgmma):
                async_bufs += [s.a.buffer, s.b.buffer]
        bars = [x.bar for x in stmts if isinstance(x, (TmaLoad, *MBARRIER_STMTS))]
        accs = [s.acc for s in stmts if isinstance(s, Wgmma)]
        base = {b: offsets.get(b, 0) for b in dict.fromkeys(async_bufs)}
        return HopperPlan(tuple(dict.fromkeys(bars)), base, tuple(dict.fromkeys(accs)))


class HopperState:
    """mbarriers, async shared memory, accumulators, register budgets and the warpgroup
    coroutines of one chunk of blocks."""

    def __init__(self, plan: HopperPlan, g: Lanes):
        self.plan, self.g = plan, g
        self.warpgroups = -(-g.threads // WARPGROUP)
        self.text = ""  # the statement running, named in errors
        self.bars = Mbarriers(plan.barriers, g.blocks, g.lanes, g.threads, self.warpgroups,
                              self._slot_fail)
        self.shared = AsyncShared(list(plan.base), g.blocks, self.warpgroups, self._fail)
        self.acc = Accumulators(plan.accumulators, g.lanes)
        entry = min(MAX_THREAD_REGS, REG_FILE // g.threads) // 8 * 8
        self.regs: np.ndarray = np.full((g.blocks, self.warpgroups), entry, np.int64)
        self.group: np.ndarray = g.local_block * self.warpgroups + g.tid // WARPGROUP
        self.roles = Roles([g.tid // WARPGROUP == w for w in range(self.warpgroups)])

    # ------------------------------------------------------------------ errors
    def error(self, kind: str, message: str, lane: int, *, buffer: Buffer | None = None,
              index: int | None = None, collective: bool = False) -> CudaExecutionError:
        """``message`` said of ``lane``'s thread, or of its warpgroup (``collective``)."""
        blk, thr = self.g.coords(lane)
        tid = int(self.g.tid[lane])
        who = (f"warpgroup {tid // WARPGROUP} of block {blk}" if collective
               else f"thread {thr} of block {blk}")
        return CudaExecutionError(kind, f"{who} {message}", block=blk, thread=thr,
                                  buffer=None if buffer is None else buffer.name, index=index,
                                  statement=self.text or None,
                                  warp=tid // WARP if collective else None)

    def _fail(self, kind: str, message: str, lane: int, buf: Buffer, index: int
              ) -> CudaExecutionError:
        return self.error(kind, message, lane, buffer=buf, index=index)

    def _slot_fail(self, kind: str, message: str, lane: int, slot: int) -> CudaExecutionError:
        buf, index = self.bars.where(slot)
        return self.error(kind, message, lane, buffer=buf, index=index)

    # ------------------------------------------------------------------ warpgroups
    def leaders(self, mask: np.ndarray) -> np.ndarray:
        """The first lane of each warpgroup that runs a warpgroup-collective statement;
        ``divergent_warp`` unless all of its 128 threads run it."""
        g = self.g
        count = g.blocks * self.warpgroups
        active = np.bincount(self.group[mask], minlength=count)
        size = np.bincount(self.group, minlength=count)
        part = (active > 0) & ((active < WARPGROUP) | (size < WARPGROUP))
        if part.any():
            lanes = np.nonzero(self.group == int(np.argmax(part)))[0]
            inside, outside = lanes[mask[lanes]], lanes[~mask[lanes]]
            why = (f"thread {g.coords(int(outside[0]))[1]} does not" if outside.size else
                   f"the warpgroup has only {lanes.size} threads")
            raise self.error("divergent_warp", f"runs a warpgroup-collective statement with "
                             f"{inside.size} of its {WARPGROUP} threads: {why}",
                             int(outside[0] if outside.size else inside[0]), collective=True)
        return np.nonzero(mask & (g.tid % WARPGROUP == 0))[0]

    def uniform(self, leaders: np.ndarray, values: np.ndarray, what: str) -> np.ndarray:
        """``values`` (one per lane) per warpgroup of ``leaders``; ``nonuniform_warp`` where
        its threads disagree."""
        lanes = leaders[:, None] + np.arange(WARPGROUP)[None, :]
        v = np.broadcast_to(values, (self.g.lanes,))[lanes]
        differ = v != v[:, :1]
        if differ.any():
            i, j = np.argwhere(differ)[0]
            raise self.error("nonuniform_warp", f"disagrees on {what}: {int(v[i, 0])} in its "
                             f"first thread, {int(v[i, j])} in thread "
                             f"{self.g.coords(int(lanes[i, j]))[1]}; a warpgroup-collective "
                             "operand must be the same in all 128 threads", int(leaders[i]),
                             collective=True)
        return v[:, 0].astype(np.int64)

    def retired(self, block: int, warpgroup: int) -> int:
        """wgmma groups the threads of ``warpgroup`` of ``block`` retired (the most any)."""
        first = block * self.g.threads + warpgroup * WARPGROUP
        return int(self.acc.retired[first:first + WARPGROUP].max())

    # ------------------------------------------------------------------ hooks of the core
    def check_plain(self, mem: MemoryView, keys: np.ndarray, lanes: np.ndarray, write: bool,
                    text: str) -> None:
        """A thread's load or store of ``keys``: accumulators a wgmma is still writing are
        ``wgmma_pending``, and a store leaves them to be fenced; async shared memory must
        be filled for a reader and free for a writer."""
        buf = mem.buffer
        if buf in self.acc.group:
            busy = self.acc.pending(buf, keys, lanes)
            if busy.any():
                k = int(np.argmax(busy))
                self.text = text
                raise self.error("wgmma_pending", f"{'writes' if write else 'reads'} "
                                 f"{buf.name}[{int(keys[k]) % buf.size}], an accumulator of a "
                                 "wgmma in flight (before a wgmma.wait_group covers it)",
                                 int(lanes[k]), buffer=buf, index=int(keys[k]) % buf.size)
            if write:
                self.acc.unfenced[buf][keys] = True
        elif buf in self.shared.fill:
            self.text = text
            blocks = self.g.local_block[lanes]
            if write:
                self.shared.check_write(buf, keys, lanes, self.bars, self.retired, blocks)
                self.shared.record_fill(buf, keys, np.full(keys.size, PLAIN))
            else:
                self.shared.check_read(buf, keys[:, None], lanes[:, None], self.bars, blocks,
                                       None)

    def allocated(self, buf: Buffer, mask: np.ndarray) -> None:
        self.acc.allocated(buf, np.nonzero(mask)[0])

    def sync(self, mask: np.ndarray) -> None:
        """``__syncthreads()`` by the running warpgroup: wait until every live one is at a
        barrier; the scheduler passes it (``run``'s ``barrier``)."""
        lane = int(np.argmax(mask))

        def what() -> Stuck:
            return Stuck("deadlock", f"warpgroup {int(self.g.tid[lane]) // WARPGROUP} of block "
                         f"{self.g.coords(lane)[0]} waits at __syncthreads()", lane)
        self.roles.barrier(mask, what)

    def yield_point(self) -> None:
        """Before an mbarrier operation: once a phase completed, its waiters run first."""
        if self.bars.completed:
            self.bars.completed = False
            self.roles.yield_()

    # ------------------------------------------------------------------ running
    def run(self, body: Callable[[np.ndarray], None],
            barrier: Callable[[np.ndarray], None]) -> None:
        """Run the chunk: ``body(mask)`` per warpgroup, ``barrier(lanes)`` (the core's
        ``__syncthreads()``) where all met at one; then no barrier may starve."""
        def release(union: np.ndarray) -> None:
            barrier(union)
            self.bars.share(np.nonzero(union)[0])
        self.roles.run(body, release, self._stuck)
        starved = self.bars.starved_any()
        if starved is not None:
            block, slot = starved
            lane = block * self.g.threads
            self.text = ""
            raise self._slot_fail("too_many_expected_bytes", self._starved(block, slot), lane,
                                  slot)

    def _starved(self, block: int, slot: int) -> str:
        return (f"ends with {self.bars.names[slot]} in phase {int(self.bars.done[block, slot])}"
                f" still expecting {int(self.bars.tx[block, slot])} bytes after all its "
                "arrivals: arrive.expect_tx announced more than the copies bring")

    def _stuck(self, waiters: list[tuple[int, Blocked]]) -> Exception:
        """The error of a chunk in which no warpgroup can go on: the plainest cause one of
        them names, else a ``deadlock`` naming every waiter."""
        stuck = [b.what() for _, b in waiters]
        plain = [s for s in stuck if s.kind != "deadlock"]
        first = plain[0] if plain else stuck[0]
        message = first.message if plain else (
            "no warpgroup can go on: " + "; ".join(s.message for s in stuck))
        blk, thr = self.g.coords(first.lane)
        return CudaExecutionError(first.kind, message, block=blk, thread=thr)
