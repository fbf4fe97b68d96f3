"""wgmma in the CUDA execution model: ``Wgmma``, ``WgmmaFence``, ``WgmmaCommit`` and
``WgmmaWait``, warpgroup-collective (all 128 threads, ``divergent_warp``; the same operands
in each, ``nonuniform_warp``).

A wgmma decodes its matrix descriptors as the hardware does (``simulate_layout``: K-major
A, K- or MN-major B, 128-byte swizzle; the start 16-byte aligned and on the swizzle
pattern's first row, else ``misaligned``), reads its operands when it is issued, and adds
their float32-rounded product to each thread's accumulator registers in the wgmma fragment
layout. Its operands must have been filled by TMA copies whose phase every thread of the
warpgroup saw (``stage_not_ready``) with the descriptor's swizzle (``swizzle_mismatch``);
they stay in use until a wait retires its group. Its accumulators are undefined until a
``wgmma.wait_group`` of the thread covers its group (``wgmma_pending``), and registers a
thread's store wrote need a ``wgmma.fence`` before a wgmma uses them (``missing_fence``).
Operand types other than float16/bfloat16, other swizzles, and an MN-major A are
``invalid_statement``.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from autotune.codegen.cuda.hopper import WGMMA_NS
from autotune.codegen.cuda.semantics import flat_index
from autotune.codegen.cuda.simulate_error import CudaExecutionError
from autotune.codegen.cuda.simulate_hopper_state import Core, HopperState, Lanes
from autotune.codegen.cuda.simulate_layout import (
    PATTERN_BYTES,
    ROW_BYTES,
    WGMMA_K,
    WGMMA_M,
    descriptor_offsets,
    fragment_map,
    swizzle,
)
from autotune.ir.expr import FLOAT, HALF_DTYPES, Const
from autotune.ir.stmt import (
    WARPGROUP,
    Scope,
    SmemMatrix,
    Stmt,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
    format_stmt,
)
from autotune.ops.dtypes import element_bytes

StmtFn = Callable[[Any, Any, np.ndarray], None]
SWIZZLE = 128          # the one descriptor swizzle the model decodes
DESC_ALIGN = 16        # bytes: a descriptor drops an address's low 4 bits
DESC_LIMIT = 1 << 18   # bytes: addresses and offsets a descriptor's 14-bit fields hold


def wgmma_stmt(core: Core, s: Stmt, text: str) -> StmtFn:
    """The closure of one wgmma, fence, commit or wait."""
    if isinstance(s, Wgmma):
        return _Wgmma(core, s, text).run
    if isinstance(s, (WgmmaFence, WgmmaCommit, WgmmaWait)):
        return _sync_stmt(s, text)
    raise TypeError(f"unknown statement {type(s).__name__}")


def _invalid(s: Stmt, what: str) -> CudaExecutionError:
    return CudaExecutionError("invalid_statement", what, statement=format_stmt(s)[0].strip())


def _state(g: Lanes, text: str) -> HopperState:
    h = g.hopper
    assert h is not None, "a wgmma statement outside a Hopper kernel's run"
    h.text = text
    return h


def _sync_stmt(s: WgmmaFence | WgmmaCommit | WgmmaWait, text: str) -> StmtFn:
    def run(g: Lanes, env: Any, mask: np.ndarray) -> None:
        h = _state(g, text)
        if not h.leaders(mask).size:
            return
        lanes = np.nonzero(mask)[0]
        acc = h.acc
        if isinstance(s, WgmmaFence):
            acc.fence(lanes)
        elif isinstance(s, WgmmaCommit):
            acc.committed[lanes] += 1
        else:
            acc.wait(lanes, s.pending)
            col = h.bars.slots + g.tid[lanes] // WARPGROUP  # the lane knows its own groups
            h.bars.know[lanes, col] = np.maximum(h.bars.know[lanes, col], acc.retired[lanes])
    return run


class _Wgmma:
    """One wgmma: its static checks, operand layouts and the closure that runs it."""

    def __init__(self, core: Core, s: Wgmma, text: str):
        self.s, self.text = s, text
        a, b = s.a, s.b
        for m in (a, b):
            if m.buffer.scope is not Scope.SHARED or m.buffer.dtype not in HALF_DTYPES:
                raise _invalid(s, f"{m.buffer.name}: wgmma reads float16 or bfloat16 operands "
                                  "from shared memory")
            if m.swizzle != SWIZZLE:
                raise _invalid(s, f"{m.buffer.name}: a {m.swizzle}-byte swizzled descriptor; "
                                  f"the model decodes {SWIZZLE}-byte ones only")
            if m.lbo % DESC_ALIGN or m.sbo % DESC_ALIGN or max(m.lbo, m.sbo) >= DESC_LIMIT:
                raise _invalid(s, f"{m.buffer.name}: leading/stride byte offsets {m.lbo}/"
                                  f"{m.sbo} are not multiples of {DESC_ALIGN} below "
                                  f"{DESC_LIMIT}")
        if a.buffer.dtype != b.buffer.dtype:
            raise _invalid(s, f"wgmma of {a.buffer.dtype} x {b.buffer.dtype}")
        if a.major != "k":
            raise _invalid(s, f"{a.buffer.name}: an MN-major A (the model and the emitter "
                              "take A K-major)")
        if s.acc.scope is not Scope.LOCAL or s.acc.dtype != FLOAT or s.n not in WGMMA_NS:
            raise _invalid(s, f"{s.acc.name}: wgmma accumulates n = {s.n} (8 to 256, step 8) "
                              "float32 columns in registers")
        self.item = element_bytes(a.buffer.dtype)
        self.offs_a = descriptor_offsets("k", WGMMA_M, WGMMA_K, a.lbo, a.sbo, self.item)
        if b.major == "mn":
            self.offs_b = descriptor_offsets("mn", WGMMA_K, s.n, b.lbo, b.sbo, self.item)
        else:  # stored N x K: read as (n, k), used as (k, n)
            nk = descriptor_offsets("k", s.n, WGMMA_K, b.lbo, b.sbo, self.item)
            self.offs_b = nk.reshape(s.n, WGMMA_K).T.reshape(-1)
        self.start_a, self.start_b = core.expr(a.offset), core.expr(b.offset)
        self.acc_at = core.expr(flat_index(s.acc, (*s.acc_index, Const(0)), core.ext))

    def run(self, g: Lanes, env: Any, mask: np.ndarray) -> None:
        h = _state(g, self.text)
        leaders = h.leaders(mask)
        if not leaders.size:
            return
        s = self.s
        values = [np.asarray(f(g, env, mask)) for f in (self.start_a, self.start_b, self.acc_at)]
        start_a = h.uniform(leaders, values[0], f"the offset into {s.a.buffer.name}")
        start_b = h.uniform(leaders, values[1], f"the offset into {s.b.buffer.name}")
        acc_at = h.uniform(leaders, values[2], f"the row of {s.acc.name}")
        lanes = leaders[:, None] + np.arange(WARPGROUP)[None, :]
        blocks = g.local_block[leaders]
        group = h.acc.committed[leaders]
        wg = g.tid[leaders] // WARPGROUP
        ops = []
        for m, start, offs in ((s.a, start_a, self.offs_a), (s.b, start_b, self.offs_b)):
            keys = self._keys(h, g, m, start, offs, leaders, blocks)
            h.shared.check_read(m.buffer, keys, lanes, h.bars, blocks, m.swizzle)
            h.shared.record_read(m.buffer, keys, wg, group)
            ops.append(g.memory[m.buffer].data[keys].astype(np.float64))
        product = (ops[0].reshape(-1, WGMMA_M, WGMMA_K) @ ops[1].reshape(-1, WGMMA_K, s.n))
        self._accumulate(h, g, lanes, acc_at, product, group)

    def _keys(self, h: HopperState, g: Lanes, m: SmemMatrix, start: np.ndarray,
              offs: np.ndarray, leaders: np.ndarray, blocks: np.ndarray) -> np.ndarray:
        """The elements (warpgroups x operand elements) a descriptor addresses."""
        base = h.plan.base[m.buffer]
        addr: np.ndarray = base + start * self.item
        bad = (addr % DESC_ALIGN != 0) | ((addr // ROW_BYTES) % (PATTERN_BYTES // ROW_BYTES) != 0)
        if bad.any():
            k = int(np.argmax(bad))
            raise h.error("misaligned", f"describes {m.buffer.name} from element "
                          f"{int(start[k])} (byte {int(addr[k])} of shared memory): a "
                          f"descriptor's start is {DESC_ALIGN}-byte aligned and, with base "
                          f"offset 0, on the first row of a {PATTERN_BYTES}-byte swizzle "
                          "pattern", int(leaders[k]), buffer=m.buffer, index=int(start[k]),
                          collective=True)
        phys: np.ndarray = swizzle(addr[:, None] + offs[None, :], m.swizzle) - base
        elem: np.ndarray = phys // self.item
        out = (elem < 0) | (elem >= m.buffer.size)
        if out.any():
            w, e = np.argwhere(out)[0]
            raise h.error("out_of_bounds", f"reads {m.buffer.name}[{int(elem[w, e])}] through "
                          f"a descriptor, outside its {m.buffer.size} elements",
                          int(leaders[w]), buffer=m.buffer, index=int(elem[w, e]),
                          collective=True)
        keys = blocks[:, None] * m.buffer.size + elem
        written = g.memory[m.buffer].written
        if written is not None and not written[keys].all():
            w, e = np.argwhere(~written[keys])[0]
            raise h.error("uninitialized", f"reads {m.buffer.name}[{int(elem[w, e])}] "
                          "(shared memory) through a descriptor, and no copy or thread "
                          "wrote it", int(leaders[w]), buffer=m.buffer,
                          index=int(elem[w, e]), collective=True)
        return keys

    def _accumulate(self, h: HopperState, g: Lanes, lanes: np.ndarray, acc_at: np.ndarray,
                    product: np.ndarray, group: np.ndarray) -> None:
        """acc += product, each thread's registers in the fragment layout; the registers
        belong to ``group`` until it retires."""
        acc, n = self.s.acc, self.s.n
        half = n // 2
        if ((acc_at < 0) | (acc_at + half > acc.size)).any():
            k = int(np.argmax((acc_at < 0) | (acc_at + half > acc.size)))
            raise h.error("out_of_bounds", f"accumulates into {acc.name}[{int(acc_at[k])}:"
                          f"+{half}], outside its {acc.size} registers", int(lanes[k, 0]),
                          buffer=acc, index=int(acc_at[k]), collective=True)
        keys = (lanes * acc.size + acc_at[:, None])[:, :, None] + np.arange(half)
        mem = g.memory[acc]
        assert mem.written is not None
        for flags, kind, why in ((~mem.written[keys], "uninitialized",
                                  "which no thread wrote (the wgmma adds to them)"),
                                 (h.acc.unfenced[acc][keys], "missing_fence",
                                  "which a thread's store wrote after the warpgroup's last "
                                  "wgmma.fence")):
            if flags.any():
                w, t, r = np.argwhere(flags)[0]
                raise h.error(kind, f"accumulates into {acc.name}[{int(acc_at[w]) + int(r)}] "
                              f"of thread {g.coords(int(lanes[w, t]))[1]}, {why}",
                              int(lanes[w, 0]), buffer=acc, index=int(acc_at[w]) + int(r),
                              collective=True)
        rows, cols = fragment_map(n)
        mem.data[keys] = (mem.data[keys] + product[:, rows, cols]).astype(np.float32)
        h.acc.group[acc][keys] = group[:, None, None]
