"""The Hopper (sm_90a) statements in the CUDA execution model: TMA copies, mbarriers and
``setmaxnreg`` here, wgmma in ``simulate_wgmma``; their state in ``simulate_hopper_state``.

A ``TmaLoad`` copies its tensor map's box at the coordinates (zeros outside the tensor) to
shared memory in the physical layout of its swizzle (``simulate_layout``), lands at once,
and counts its bytes down on its barrier's phase; the data belongs to that phase. An
``MbarrierWait`` blocks its warpgroup's coroutine (``simulate_roles``) until the phase of
its parity completed. ``setmaxnreg`` is warpgroup-collective and moves registers between
warpgroups: an increase waits until the block's warpgroups fit the register file.

Errors besides the core's (bounds, poison, races on the barrier words): ``wrong_parity``,
``stage_not_ready``, ``stage_in_use``, ``too_few_expected_bytes``,
``too_many_expected_bytes``, ``too_many_arrivals``, ``deadlock``, ``register_overflow``,
``misaligned`` (a TMA destination not 128-byte aligned) and ``invalid_statement`` (what
the model does not run: see each check).
"""
from __future__ import annotations

from math import prod
from typing import Any, Callable

import numpy as np

from autotune.codegen.cuda.semantics import flat_index
from autotune.codegen.cuda.simulate_error import CudaExecutionError
from autotune.codegen.cuda.simulate_hopper_state import REG_FILE, Core, HopperState, Lanes
from autotune.codegen.cuda.simulate_layout import box_elements, swizzle
from autotune.codegen.cuda.simulate_mbarrier import MAX_COUNT
from autotune.codegen.cuda.simulate_roles import Stuck
from autotune.codegen.cuda.simulate_wgmma import wgmma_stmt
from autotune.ir.stmt import (
    WARPGROUP,
    Buffer,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    NamedSync,
    Scope,
    SetMaxNReg,
    Stmt,
    TmaLoad,
    format_stmt,
)
from autotune.ops.dtypes import MBARRIER, element_bytes

StmtFn = Callable[[Any, Any, np.ndarray], None]  # (grid, env, mask): the core's closures
TMA_ALIGN = 128     # bytes: a bulk tensor copy's shared destination
TMA_STRIDE = 16     # bytes: a tensor map's row strides are multiples of this
MAX_BOX = 256       # elements of a box along one dimension
REG_STEP, MIN_REGS, MAX_REGS = 8, 24, 256  # setmaxnreg's counts


def hopper_stmt(core: Core, s: Stmt) -> StmtFn:
    """The closure that runs one Hopper statement (checked once, here)."""
    text = core.context = format_stmt(s)[0].strip()
    if isinstance(s, TmaLoad):
        return _tma(core, s, text)
    if isinstance(s, (MbarrierInit, MbarrierArrive, MbarrierWait)):
        return _mbarrier(core, s, text)
    if isinstance(s, SetMaxNReg):
        return _setmaxnreg(s, text)
    if isinstance(s, NamedSync):
        return _named_sync(s, text)
    return wgmma_stmt(core, s, text)


def invalid(s: Stmt, buf: Buffer, why: str) -> CudaExecutionError:
    return CudaExecutionError("invalid_statement", f"{buf.name}: {why}", buffer=buf.name,
                              statement=format_stmt(s)[0].strip())


def state(g: Lanes, text: str) -> HopperState:
    """The chunk's Hopper state, naming ``text`` as the running statement."""
    h = g.hopper
    assert h is not None, "a Hopper statement outside a Hopper kernel's run"
    h.text = text
    return h


def per_lane(fn: Callable[..., Any], g: Lanes, env: Any, mask: np.ndarray,
             lanes: np.ndarray) -> np.ndarray:
    """An expression's int64 value in each of ``lanes``."""
    return np.broadcast_to(np.asarray(fn(g, env, mask)), (g.lanes,))[lanes].astype(np.int64)


# ---------------------------------------------------------------- mbarriers

def _check_barrier(s: Stmt, bar: Buffer) -> None:
    if bar.scope is not Scope.SHARED or bar.dtype != MBARRIER:
        raise invalid(s, bar, f"an mbarrier is a {MBARRIER} of shared memory, not a "
                              f"{bar.dtype} of {bar.scope.value} memory")


def _mbarrier(core: Core, s: MbarrierInit | MbarrierArrive | MbarrierWait, text: str
              ) -> StmtFn:
    _check_barrier(s, s.bar)
    bar = s.bar
    index = core.expr(flat_index(bar, (s.index,), core.ext))
    if isinstance(s, MbarrierInit) and not 0 < s.count <= MAX_COUNT:
        raise invalid(s, bar, f"an mbarrier counts 1 to {MAX_COUNT} arrivals, not {s.count}")
    if isinstance(s, MbarrierArrive) and not 0 <= s.expect_bytes <= MAX_COUNT:
        raise invalid(s, bar, f"expect_tx of {s.expect_bytes} bytes (0 to {MAX_COUNT})")
    parity = core.expr(s.parity) if isinstance(s, MbarrierWait) else None

    def run(g: Lanes, env: Any, mask: np.ndarray) -> None:
        h = state(g, text)
        if not isinstance(s, MbarrierInit):
            h.yield_point()
            h.text = text
        lanes = np.nonzero(mask)[0]
        if not lanes.size:
            return
        at = per_lane(index, g, env, mask, lanes)
        mem = g.memory[bar]
        keys = core.access(g, mem, at, lanes, isinstance(s, MbarrierInit), text)
        blocks, slots = g.local_block[lanes], h.bars.slot(bar, at)
        if isinstance(s, MbarrierInit):
            assert mem.written is not None
            mem.written[keys] = True
            h.bars.init(blocks, slots, s.count)
        elif isinstance(s, MbarrierArrive):
            h.bars.arrive(lanes, blocks, slots, s.expect_bytes)
        else:
            assert parity is not None
            _wait(h, lanes, blocks, slots, per_lane(parity, g, env, mask, lanes) & 1)
    return run


def _wait(h: HopperState, lanes: np.ndarray, blocks: np.ndarray, slots: np.ndarray,
          parity: np.ndarray) -> None:
    """Block the warpgroup until every lane's wait returns; then they see the phase."""
    bars = h.bars
    text = h.text
    while True:
        h.text = text
        bars.check_parity(lanes, blocks, slots, parity)
        if bars.wait_ready(blocks, slots, parity).all():
            bars.observe(lanes, blocks, slots)
            return

        def ready() -> bool:
            return bool(bars.wait_ready(blocks, slots, parity).all())

        def what() -> Stuck:
            k = int(np.argmin(bars.wait_ready(blocks, slots, parity)))
            lane, b, sl = int(lanes[k]), int(blocks[k]), int(slots[k])
            blk = h.g.coords(lane)[0]
            who = f"warpgroup {int(h.g.tid[lane]) // WARPGROUP} of block {blk}"
            if bars.starved(blocks[k:k + 1], slots[k:k + 1]) is not None:
                return Stuck("too_many_expected_bytes", f"{who} waits on {bars.names[sl]}, whose "
                             f"phase {int(bars.done[b, sl])} has all its arrivals but still "
                             f"expects {int(bars.tx[b, sl])} bytes: arrive.expect_tx "
                             "announced more than the copies bring", lane)
            return Stuck("deadlock", f"{who} waits on {bars.names[sl]} for parity "
                         f"{int(parity[k])} (phase {int(bars.own[lane, sl]) + 1}), and "
                         f"{bars.describe(b, sl)}", lane)
        h.roles.block(ready, what)


# ---------------------------------------------------------------- TMA

def _check_tma(core: Core, s: TmaLoad) -> None:
    """Refuse a copy no tensor map could make: operands, box and strides."""
    src, dst, m = s.tmap.buffer, s.dst, s.tmap
    _check_barrier(s, s.bar)
    if src not in core.func.args or src.scope is not Scope.GLOBAL:
        raise invalid(s, src, "a tensor map describes a global argument of the kernel")
    if dst.scope is not Scope.SHARED or dst.dtype != src.dtype:
        raise invalid(s, dst, f"TMA copies {src.dtype} into shared memory of that type, not "
                              f"into {dst.dtype} of {dst.scope.value} memory")
    item = element_bytes(src.dtype)
    inner = m.box[-1] * item
    if m.swizzle and inner != m.swizzle:
        raise invalid(s, src, f"a box row of {inner} bytes under a {m.swizzle}-byte swizzle: "
                              "the model copies rows of exactly the swizzle's width")
    if inner % TMA_STRIDE or not all(0 < b <= MAX_BOX for b in m.box):
        raise invalid(s, src, f"box {m.box}: each side 1 to {MAX_BOX} elements, rows a "
                              f"multiple of {TMA_STRIDE} bytes")
    rows = [prod(src.shape[d:]) * item for d in range(1, len(src.shape))]
    if any(r % TMA_STRIDE for r in rows):
        raise invalid(s, src, f"strides of {rows} bytes: cuTensorMapEncodeTiled takes "
                              f"multiples of {TMA_STRIDE}")


def _tma(core: Core, s: TmaLoad, text: str) -> StmtFn:
    _check_tma(core, s)
    src, dst, m = s.tmap.buffer, s.dst, s.tmap
    item = element_bytes(src.dtype)
    dst_off = core.expr(s.dst_offset)
    coords = [core.expr(c) for c in s.coords]
    bar_index = core.expr(flat_index(s.bar, (s.bar_index,), core.ext))
    elems = m.box_elems
    logical: np.ndarray = np.arange(elems, dtype=np.int64) * item

    def run(g: Lanes, env: Any, mask: np.ndarray) -> None:
        h = state(g, text)
        lanes = np.nonzero(mask)[0]
        if not lanes.size:
            return
        off = per_lane(dst_off, g, env, mask, lanes)
        base = h.plan.base[dst]
        addr: np.ndarray = base + off * item
        _check_destination(h, dst, off, addr, elems, lanes)
        at = per_lane(bar_index, g, env, mask, lanes)
        core.access(g, g.memory[s.bar], at, lanes, False, text)
        blocks, slots = g.local_block[lanes], h.bars.slot(s.bar, at)
        where = np.stack([per_lane(c, g, env, mask, lanes) for c in coords], axis=1)
        flat, inside = box_elements(src.shape, m.loaded, where, m.element_strides)
        values = np.where(inside, g.memory[src].data[np.where(inside, flat, 0)], 0.0)
        phys: np.ndarray = swizzle(addr[:, None] + logical[None, :], m.swizzle) - base
        keys = (blocks * dst.size)[:, None] + phys // item
        writers: np.ndarray = np.repeat(lanes, elems)
        h.shared.check_write(dst, keys.reshape(-1), writers, h.bars, h.retired,
                             g.local_block[writers])
        mem = g.memory[dst]
        assert mem.written is not None
        mem.data[keys] = values
        mem.written[keys] = True
        fills = h.shared.new_fills(slots, h.bars.done[blocks, slots], m.swizzle)
        h.shared.record_fill(dst, keys.reshape(-1), np.repeat(fills, elems))
        h.bars.complete_tx(lanes, blocks, slots, elems * item)
    return run


def _check_destination(h: HopperState, dst: Buffer, off: np.ndarray, addr: np.ndarray,
                       elems: int, lanes: np.ndarray) -> None:
    """Each lane's copy lands aligned and inside ``dst`` (from element ``off``, at shared
    byte ``addr``)."""
    bad = addr % TMA_ALIGN != 0
    if bad.any():
        k = int(np.argmax(bad))
        raise h.error("misaligned", f"copies into {dst.name} + {int(off[k])}, byte "
                      f"{int(addr[k])} of shared memory: not {TMA_ALIGN}-byte aligned",
                      int(lanes[k]), buffer=dst, index=int(off[k]))
    out = (off < 0) | (off + elems > dst.size)
    if out.any():
        k = int(np.argmax(out))
        raise h.error("out_of_bounds", f"copies {elems} elements into {dst.name} from "
                      f"{int(off[k])} on, outside its {dst.size}", int(lanes[k]),
                      buffer=dst, index=int(off[k]))


# ---------------------------------------------------------------- named barriers

def _named_sync(s: NamedSync, text: str) -> StmtFn:
    """``bar.sync id, n``: whole warpgroups meet (the model runs a warpgroup in lockstep),
    and go on once n / 128 of them are there; their blocks pass a barrier phase, as at
    ``__syncthreads()``: plain shared memory starts a new one, and the participants' fences
    before it are ordered before an atomic after it (split-K's publication). The producer
    never joins the consumers' barrier: one that waits for a warpgroup that never comes is
    a ``deadlock``."""
    if s.threads % WARPGROUP:
        raise CudaExecutionError("invalid_statement", f"bar.sync {s.barrier} of {s.threads} "
                                 f"threads: the model meets whole warpgroups of {WARPGROUP}",
                                 statement=text)
    count = s.threads // WARPGROUP

    def run(g: Lanes, env: Any, mask: np.ndarray) -> None:
        h = state(g, text)
        leaders = h.leaders(mask)
        if not leaders.size:
            return
        lane = int(leaders[0])

        def what() -> Stuck:
            return Stuck("deadlock", f"warpgroup {int(g.tid[lane]) // WARPGROUP} of block "
                         f"{g.coords(lane)[0]} waits at bar.sync {s.barrier} for {count} "
                         "warpgroups, and too few come", lane)
        if h.roles.named(s.barrier, count, what):
            blocks = np.unique(g.local_block[mask])
            g.phase[blocks] += 1
            for mem in g.memory.values():
                b = mem.buffer
                if b.scope is Scope.SHARED and b.dtype != MBARRIER and b not in h.shared.fill:
                    mem.new_phase(blocks)
    return run


# ---------------------------------------------------------------- setmaxnreg

def _setmaxnreg(s: SetMaxNReg, text: str) -> StmtFn:
    if s.count % REG_STEP or not MIN_REGS <= s.count <= MAX_REGS:
        raise CudaExecutionError("invalid_statement", f"setmaxnreg {s.count}: a multiple of "
                                 f"{REG_STEP} from {MIN_REGS} to {MAX_REGS}", statement=text)
    count = s.count

    def run(g: Lanes, env: Any, mask: np.ndarray) -> None:
        h = state(g, text)
        leaders = h.leaders(mask)
        if not leaders.size:
            return
        blocks, wg = g.local_block[leaders], g.tid[leaders] // WARPGROUP
        if not s.increase:
            h.regs[blocks, wg] = count
            return

        def fits() -> np.ndarray:
            others = h.regs[blocks].sum(axis=1) - h.regs[blocks, wg]
            return (others + count) * WARPGROUP <= REG_FILE

        def what() -> Stuck:
            k = int(np.argmin(fits()))
            b = int(blocks[k])
            who = f"warpgroup {int(wg[k])} of block {g.coords(int(leaders[k]))[0]}"
            return Stuck("register_overflow", f"{who} raises its registers to {count} per thread, "
                         f"but the block's warpgroups then need "
                         f"{int((h.regs[b].sum() - h.regs[b, wg[k]] + count) * WARPGROUP)} of "
                         f"the {REG_FILE} registers (per thread now: "
                         f"{h.regs[b].tolist()}), and no warpgroup gives any back",
                         int(leaders[k]))
        while not fits().all():
            h.roles.block(lambda: bool(fits().all()), what)
        h.regs[blocks, wg] = count
    return run

