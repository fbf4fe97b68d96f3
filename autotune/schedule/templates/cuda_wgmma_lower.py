"""Loop AST of a warp-specialized wgmma kernel, built directly from a `WgmmaTiling`.

One block per multiprocessor (blockIdx.x) walks output tiles ``blockIdx.x + p * gridDim.x``.
Thread 0 initialises two mbarriers per stage ("full": one arrival, the producer's, plus the
bytes its copies bring; "empty": one arrival per consumer warpgroup), then a barrier.
Warpgroup 0 is the producer: it lowers its registers, and its thread 0 runs the k steps of
every tile of the block in order, step ``it`` into stage ``it % S``: it waits until the
consumers freed the stage (phase ``it / S - 1`` of "empty", from the second round on),
announces the stage's bytes on "full" and issues the TMA copies of A and B, which complete
on it. Warpgroups 1..C are consumers: they raise their registers, and per tile zero their
accumulators, then per k step wait for phase ``it / S`` of "full", issue the wgmmas of the
stage (4 k16 steps x MI slices), commit them as one group and wait until at most
``inflight`` groups are pending; the stage whose wgmmas have completed is freed by one
arrival per consumer. Finally each thread applies the epilogue to its accumulators (the
wgmma register layout, `wgmma_fragment`) and stores them under bounds guards. TMA reads
zeros outside A and B, so ragged edges need no guard on the way in.

Split-K (S > 1): the block's work units are (tile, split) pairs, the S splits of a tile
adjacent; every split runs the same number of k steps (the last one's overhang reads zeros
past K, or past the kernel's taps), so the producer's and consumers' step count, which
drives the stages' parities, stays uniform. Each consumer thread stores its float32
partials into the split's slice of a workspace, fences, the consumers meet at a named
barrier (the producer never joins), one thread counts the arrival on the tile's counter
(atomicAdd, then a fence), they meet again, and the consumers of the block that arrived
last sum the S slices in split order, apply the epilogue and reset the counter.

An NHWC conv2d's k step is one kernel tap (r, s) and 64 channels: the A box is the input
under the block's BH x BW output pixels for that tap (every stride-th pixel, from
``oy * stride - pad + r * dilation``; the padding is outside the tensor, so zeros), the B box
the KRSC weight's BN x 64 (K-major: wgmma takes B untransposed).
"""
from __future__ import annotations

from typing import Callable

from autotune.ir.expr import FLOAT, Const, Expr, Load, Var, all_of, cmp, minimum
from autotune.ir.stmt import (
    WARP,
    WARPGROUP,
    Allocate,
    AtomicAdd,
    Buffer,
    Fence,
    For,
    ForKind,
    IfThenElse,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    NamedSync,
    PrimFunc,
    Scope,
    Seq,
    SetMaxNReg,
    SmemMatrix,
    Stmt,
    Store,
    Sync,
    TensorMap,
    TmaLoad,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from autotune.ops import Workload
from autotune.ops.dtypes import MBARRIER
from autotune.schedule.templates.cuda_tensorcore import gemm_dims
from autotune.schedule.templates.cuda_tensorcore_lower import epilogue_value
from autotune.schedule.templates.cuda_wgmma import (
    BLOCK_K,
    BOX_N,
    HALF_BYTES,
    PRODUCER_REGS,
    WgmmaTiling,
    k_tiles,
    limits,
    tile_counts,
    tiling,
)
from autotune.space import Config
from autotune.target import Target

SWIZZLE = 128                      # bytes: one row of BLOCK_K halves
SWIZZLE_ATOM = 8 * SWIZZLE         # bytes of 8 swizzled rows: the descriptors' group stride
K_STEP = 16                        # the k of one wgmma
ZERO = Const(0.0, FLOAT)


def lower(wl: Workload, target: Target, cfg: Config) -> PrimFunc:
    """The kernel of ``cfg`` as a loop AST, its persistent grid sized to the target."""
    return lower_wgmma(wl, tiling(cfg), limits(target).multiprocessors)


def lower_wgmma(wl: Workload, t: WgmmaTiling, multiprocessors: int) -> PrimFunc:
    """The kernel of ``wl`` tiled by ``t`` for a device of ``multiprocessors`` SMs."""
    return _Kernel(wl, t, multiprocessors).func()


class _Kernel:
    def __init__(self, wl: Workload, t: WgmmaTiling, multiprocessors: int):
        self.wl, self.t = wl, t
        self.bufs = {a.name: Buffer(a.name, a.shape, a.dtype) for a in wl.arg_specs}
        self.conv = wl.op == "conv2d"
        if self.conv:  # pixels x K channels over R*S*C (an NCHW conv is the transpose)
            self.M, self.N = wl.out_h * wl.out_w, wl.dim("K")
        else:
            _, self.M, self.N, self.K = gemm_dims(wl)
        self.batched = wl.op == "batch_matmul" or self.conv
        self.batch, self.tiles_m, self.tiles_n = tile_counts(wl, t)
        self.per_image = self.tiles_m * self.tiles_n
        self.tiles = self.batch * self.per_image
        self.splits = t.split_k
        self.units = self.tiles * self.splits            # (tile, split) pairs
        self.grid = min(multiprocessors, self.units)
        self.rounds = -(-self.units // self.grid)        # units per block, at most
        self.k_tiles = k_tiles(wl)
        self.per = -(-self.k_tiles // self.splits)       # k steps per unit
        dt = wl.dtype
        if self.conv:
            self.c_tiles = -(-wl.dim("C") // BLOCK_K)
            (sh, sw) = wl.pair("stride")
            self.tm_a = TensorMap("tm_data", self.bufs["data"],
                                  (1, t.tile_h * sh, t.tile_w * sw, BLOCK_K), SWIZZLE,
                                  (1, sh, sw, 1))
            self.tm_b = TensorMap("tm_weight", self.bufs["weight"],
                                  (t.block_n, 1, 1, BLOCK_K), SWIZZLE)
        else:
            one = (1,) if self.batched else ()
            self.tm_a = TensorMap("tm_A", self.bufs["A"], (*one, t.bm, BLOCK_K), SWIZZLE)
            self.tm_b = TensorMap("tm_B", self.bufs["B"], (*one, BLOCK_K, BOX_N), SWIZZLE)
        self.a_elems, self.b_elems = t.bm * BLOCK_K, t.block_n * BLOCK_K
        self.a_sh = Buffer("A_shared", (t.stages * self.a_elems,), dt, Scope.SHARED)
        self.b_sh = Buffer("B_shared", (t.stages * self.b_elems,), dt, Scope.SHARED)
        self.full = Buffer("full", (t.stages,), MBARRIER, Scope.SHARED)
        self.empty = Buffer("empty", (t.stages,), MBARRIER, Scope.SHARED)
        self.acc = Buffer("acc", (t.m_tiles, t.block_n // 2), FLOAT, Scope.LOCAL)
        self.bx, self.tx = Var("bx"), Var("tx")
        self.p, self.kt = Var("p"), Var("kt")
        self.workspaces: tuple[Buffer, ...] = ()
        if self.splits > 1:
            area = t.bm * t.block_n
            self.partials = Buffer("split_partials", (self.splits * self.tiles * area,), FLOAT)
            self.counters = Buffer("split_counters", (self.tiles,), FLOAT)
            self.flag = Buffer("split_flag", (1,), FLOAT, Scope.SHARED)
            self.workspaces = (self.partials, self.counters)

    # ------------------------------------------------------------------ whole kernel
    def func(self) -> PrimFunc:
        t = self.t
        s = Var("s_init")
        init = IfThenElse(cmp("==", self.tx, 0), For(s, t.stages, ForKind.UNROLLED, Seq([
            MbarrierInit(self.full, s, 1), MbarrierInit(self.empty, s, t.consumers)])))
        roles = IfThenElse(cmp("<", self.tx, WARPGROUP), self._producer(),
                           Allocate(self.acc, self._consumer()))
        body: Stmt = Seq([init, Sync(), roles])
        shared = (self.empty, self.full, self.b_sh, self.a_sh)
        for sh in ((self.flag,) if self.splits > 1 else ()) + shared:
            body = Allocate(sh, body)
        body = For(self.tx, t.threads, ForKind.THREAD_X, body)
        body = For(self.bx, self.grid, ForKind.BLOCK_X, body)
        return PrimFunc(f"at_{self.wl.op}", tuple(self.bufs.values()), body, self.workspaces)

    # ------------------------------------------------------------------ tile schedule
    def _unit(self) -> Expr:
        return self.bx + self.p * self.grid

    def _tile(self) -> Expr:
        return self._unit() // self.splits if self.splits > 1 else self._unit()

    def _split(self) -> Expr:
        return self._unit() % self.splits

    def _coords(self) -> tuple[Expr, Expr, Expr]:
        """(image, row tile, column tile) of the block's tile ``p``: grouped raster, GROUP
        tiles of the raster dimension side by side, walked across the other one."""
        t = self.t
        tile = self._tile()
        image: Expr = tile // self.per_image if self.batch > 1 else Const(0)
        rest = tile % self.per_image if self.batch > 1 else tile
        along, across = ((self.tiles_m, self.tiles_n) if t.raster == "m"
                         else (self.tiles_n, self.tiles_m))
        group = min(t.group, along)
        size = group * across
        first = rest // size * group
        width: Expr = (Const(group) if along % group == 0
                       else minimum(Const(along) - first, group))
        inner = rest % size
        a, b = first + inner % width, inner // width
        return (image, a, b) if t.raster == "m" else (image, b, a)

    def _step(self, kt: Expr) -> tuple[Expr, Expr, Expr]:
        """(iteration, stage, phase parity) of k step ``kt`` of the block's unit ``p``."""
        it = self.p * self.per + kt
        return it, it % self.t.stages, it // self.t.stages % 2

    def _k(self) -> Expr:
        """The reduction's k step that step ``kt`` of the unit is."""
        return self._split() * self.per + self.kt if self.splits > 1 else self.kt

    def _per_tile(self, body: Stmt) -> Stmt:
        guard = cmp("<", self._unit(), self.units)
        return For(self.p, self.rounds, ForKind.SERIAL, IfThenElse(guard, body))

    # ------------------------------------------------------------------ producer
    def _producer(self) -> Stmt:
        t = self.t
        it, stage, parity = self._step(self.kt)
        copies = Seq([
            IfThenElse(cmp(">=", it, t.stages),
                       MbarrierWait(self.empty, stage, (parity + 1) % 2)),
            MbarrierArrive(self.full, stage, (self.a_elems + self.b_elems) * HALF_BYTES),
            *(self._conv_copies(stage) if self.conv else self._gemm_copies(stage)),
        ])
        loop = self._per_tile(For(self.kt, self.per, ForKind.SERIAL, copies))
        return Seq([SetMaxNReg(PRODUCER_REGS, False),
                    IfThenElse(cmp("==", self.tx, 0), loop)])

    def _gemm_copies(self, stage: Expr) -> list[Stmt]:
        """A's BM x 64 box, B's 64 x BN in 64-column boxes (B is MN-major)."""
        t = self.t
        image, tm, tn = self._coords()
        head = (image,) if self.batched else ()
        j = Var("j")
        k0 = self._k() * BLOCK_K
        return [
            TmaLoad(self.a_sh, stage * self.a_elems, self.tm_a, (*head, tm * t.bm, k0),
                    self.full, stage),
            For(j, t.block_n // BOX_N, ForKind.UNROLLED, TmaLoad(
                self.b_sh, stage * self.b_elems + j * (BLOCK_K * BOX_N), self.tm_b,
                (*head, k0, tn * t.block_n + j * BOX_N), self.full, stage)),
        ]

    def _conv_copies(self, stage: Expr) -> list[Stmt]:
        """The input box under the block's pixels for the step's tap and channels, and the
        weight's BN x 64 box of that tap (K-major)."""
        t, wl = self.t, self.wl
        image, tm, tn = self._coords()
        k = self._k()
        tap, c0 = k // self.c_tiles, k % self.c_tiles * BLOCK_K
        r, s = tap // wl.dim("S"), tap % wl.dim("S")
        (sh, sw), (ph, pw), (dh, dw) = wl.pair("stride"), wl.pair("pad"), wl.pair("dilation")
        oy, ox = self._pixel_origin(tm)
        return [
            TmaLoad(self.a_sh, stage * self.a_elems, self.tm_a,
                    (image, oy * sh - ph + r * dh, ox * sw - pw + s * dw, c0),
                    self.full, stage),
            TmaLoad(self.b_sh, stage * self.b_elems, self.tm_b,
                    (tn * t.block_n, r, s, c0), self.full, stage),
        ]

    def _pixel_origin(self, tm: Expr) -> tuple[Expr, Expr]:
        """(row, column) of the first output pixel of pixel rectangle ``tm``."""
        t = self.t
        across = -(-self.wl.out_w // t.tile_w)
        return tm // across * t.tile_h, tm % across * t.tile_w

    # ------------------------------------------------------------------ consumers
    def _consumer(self) -> Stmt:
        t = self.t
        i, r = Var("i"), Var("r")
        zero = For(i, t.m_tiles, ForKind.UNROLLED,
                   For(r, t.block_n // 2, ForKind.UNROLLED, Store(self.acc, (i, r), ZERO)))
        epilogue = self._epilogue() if self.splits == 1 else self._split_epilogue()
        tile = Seq([zero, For(self.kt, self.per, ForKind.SERIAL, self._k_step()),
                    *self._drain(), epilogue])
        return Seq([SetMaxNReg(self.t.consumer_regs, True), self._per_tile(tile)])

    def _leader(self) -> Expr:
        """The consumer thread that arrives for its warpgroup."""
        return cmp("==", self.tx % WARPGROUP, 0)

    def _k_step(self) -> Stmt:
        t = self.t
        it, stage, parity = self._step(self.kt)
        c = self.tx // WARPGROUP - 1
        kk, i = Var("kk"), Var("i_mma")
        a = SmemMatrix(self.a_sh, stage * self.a_elems + (c * t.m_tiles + i) * (64 * BLOCK_K)
                       + kk * K_STEP, "k", SWIZZLE, 16, SWIZZLE_ATOM)
        if self.conv:  # the weight's rows are channels: K-major, as A
            b = SmemMatrix(self.b_sh, stage * self.b_elems + kk * K_STEP, "k", SWIZZLE, 16,
                           SWIZZLE_ATOM)
        else:
            b = SmemMatrix(self.b_sh, stage * self.b_elems + kk * (K_STEP * BOX_N), "mn",
                           SWIZZLE, BLOCK_K * BOX_N * HALF_BYTES, SWIZZLE_ATOM)
        mmas = For(kk, BLOCK_K // K_STEP, ForKind.UNROLLED,
                   For(i, t.m_tiles, ForKind.UNROLLED, Wgmma(self.acc, (i,), a, b, t.block_n)))
        step: list[Stmt] = [MbarrierWait(self.full, stage, parity), WgmmaFence(), mmas,
                            WgmmaCommit(), WgmmaWait(t.inflight)]
        if t.inflight == 0:
            step.append(IfThenElse(self._leader(), MbarrierArrive(self.empty, stage)))
        else:  # the previous step's wgmmas are done: free its stage
            prev = (it + (t.stages - 1)) % t.stages
            step.append(IfThenElse(cmp(">", self.kt, 0), IfThenElse(
                self._leader(), MbarrierArrive(self.empty, prev))))
        return Seq(step)

    def _drain(self) -> list[Stmt]:
        """With wgmma groups in flight across stages: wait for the last, free its stage."""
        if self.t.inflight == 0:
            return []
        last = self._step(Const(self.per - 1))[1]
        return [WgmmaWait(0), IfThenElse(self._leader(), MbarrierArrive(self.empty, last))]

    def _registers(self, body: "Callable[[Expr, Expr, Callable[[int], Expr]], Stmt]"
                   ) -> Stmt:
        """``body(in_tile, col0, reg)`` over the thread's accumulators, a pair of adjacent
        columns at a time (`wgmma_fragment`: registers 4q + 2h + e hold row 8h, column
        8q + 2 (lane % 4) + e of the thread's rows): ``reg(e)`` is the pair's register e,
        ``in_tile`` its row in the block's BM x BN tile, ``col0`` (even) its first column."""
        t = self.t
        c = self.tx // WARPGROUP - 1
        lane, warp = self.tx % WARP, self.tx % WARPGROUP // WARP
        i, q, h = Var("i_out"), Var("q_out"), Var("h_out")
        in_tile = (c * t.m_tiles + i) * 64 + warp * 16 + lane // 4 + h * 8
        col0 = q * 8 + lane % 4 * 2

        def reg(e: int) -> Expr:
            return Load(self.acc, (i, q * 4 + h * 2 + e))
        return For(i, t.m_tiles, ForKind.UNROLLED, For(
            q, t.block_n // 8, ForKind.UNROLLED, For(
                h, 2, ForKind.UNROLLED, body(in_tile, col0, reg))))

    def _store(self, values: tuple[Expr, Expr], in_tile: Expr, col0: Expr) -> Stmt:
        """The epilogue on ``values``, the GEMM results at (``in_tile``, ``col0``) and the
        next column of the block's tile, stored under bounds guards: one guard for both
        where the row length is even (so the pair may go out as one 4-byte store)."""
        t = self.t
        image, tm, tn = self._coords()
        stores: list[tuple[Expr | None, Stmt]] = []
        for e, value in enumerate(values):
            col = tn * t.block_n + col0 + e
            if self.conv:  # the tile's pixels, row-major in its rectangle
                oy0, ox0 = self._pixel_origin(tm)
                oy, ox = oy0 + in_tile // t.tile_w, ox0 + in_tile % t.tile_w
                row: Expr = oy * self.wl.out_w + ox
                out_idx: tuple[Expr, ...] = (image, oy, ox, col)
                bounds = [cmp("<", oy, self.wl.out_h), cmp("<", ox, self.wl.out_w)]
            else:
                row = tm * t.bm + in_tile
                out_idx = (image, row, col) if self.batched else (row, col)
                bounds = [cmp("<", row, self.M)]
            out = epilogue_value(self.wl, self.bufs, value, row, col, out_idx)
            last = col - e if self.N % 2 == 0 else col  # even N: col0 < N bounds both
            stores.append((all_of([*bounds, cmp("<", last, self.N)]),
                           Store(self.bufs["out"], out_idx, out)))
        if self.N % 2 == 0:
            guard = stores[0][0]
            pair: Stmt = Seq([st for _, st in stores])
            return pair if guard is None else IfThenElse(guard, pair)
        return Seq([st if g is None else IfThenElse(g, st) for g, st in stores])

    def _epilogue(self) -> Stmt:
        return self._registers(
            lambda in_tile, col0, reg: self._store((reg(0), reg(1)), in_tile, col0))

    def _split_epilogue(self) -> Stmt:
        """Split-K (see the module docstring): partials out, the arrival counted among the
        consumers, and the last block's reduction in split order."""
        t = self.t
        tile, area = self._tile(), t.bm * t.block_n

        def slot(split: Expr, in_tile: Expr, col: Expr) -> Expr:
            return (split * self.tiles + tile) * area + in_tile * t.block_n + col

        def partials(in_tile: Expr, col0: Expr, reg: Callable[[int], Expr]) -> Stmt:
            return Seq([Store(self.partials, (slot(self._split(), in_tile, col0 + e),), reg(e))
                        for e in (0, 1)])

        def reduce(in_tile: Expr, col0: Expr, reg: Callable[[int], Expr]) -> Stmt:
            sums = []
            for e in (0, 1):
                total: Expr = Load(self.partials, (slot(Const(0), in_tile, col0 + e),))
                for split in range(1, self.splits):
                    total = total + Load(self.partials,
                                         (slot(Const(split), in_tile, col0 + e),))
                sums.append(total)
            return self._store((sums[0], sums[1]), in_tile, col0)

        consumers = NamedSync(1, t.consumers * WARPGROUP)
        first = cmp("==", self.tx, WARPGROUP)
        last = cmp("==", Load(self.flag, (Const(0),)), Const(float(self.splits - 1), FLOAT))
        return Seq([
            self._registers(partials),
            Fence(), consumers,
            IfThenElse(first, Seq([AtomicAdd(self.flag, (Const(0),), self.counters, (tile,),
                                             1.0), Fence()])),
            consumers,
            IfThenElse(last, Seq([
                self._registers(reduce),
                IfThenElse(first, Store(self.counters, (tile,), ZERO))])),
        ])
