"""Loop AST of a tensor-core kernel, built directly from a `Tiling`.

Per block (blockIdx.z: batch or image, y: row tile, x: column tile), one threadIdx.x loop
of WM*WN warps. The k loop fills the shared A (BM x BK) and B (BK x BN) tiles (cp.async
of up to 16 bytes where a row of the operand is contiguous and its length a multiple of
the vector, per-element guarded stores elsewhere; tails are zero-filled), then each warp
loads its FM A and FN B fragments per MMA k step and accumulates FM x FN fragments. With
S stages (cp.async) the fills of tiles t+1..t+S-1 are in flight while tile t is computed.
The epilogue goes one fragment of every warp at a time through a float32 staging tile in
shared memory, where the threads of each warp read their fragment back, apply the
epilogue in float32 and store the output under bounds guards.

Split-K (S > 1): blockIdx.z is image * S + split, and the block runs its split's range of
k tiles (the last range may overhang K: those tiles are zero-filled). Its warps store their
accumulators into the split's slice of a float32 workspace of partial tiles ([split][tile]
[BM x BN]), every thread fences, and after a barrier thread 0 counts the arrival on the
tile's counter (atomicAdd, then a fence: what the count observed is ordered before the
reads below). The old count goes through the first element of the staging tile: the block
that sees S - 1 arrived last, so every slice is published; it sums the S slices in split
order (the result does not depend on which block was last), applies the epilogue in
float32, rounds once into the output, and sets the counter back to 0 for the next launch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from autotune.ir.expr import FLOAT, Const, Expr, Load, Var, all_of, cmp
from autotune.ir.stmt import (
    Allocate,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    AtomicAdd,
    Buffer,
    Fence,
    For,
    ForKind,
    IfThenElse,
    MmaFill,
    MmaLoad,
    MmaStore,
    MmaSync,
    PrimFunc,
    Scope,
    Seq,
    Stmt,
    Store,
    Sync,
)
from autotune.ops import Workload
from autotune.ops.layout import NCHW
from autotune.schedule.activation import apply_stages
from autotune.schedule.templates.cuda_tensorcore import (
    VECTORS,
    WARP,
    Tiling,
    gemm_dims,
    k_tiles,
    limits,
    output_tiles,
    sm_version,
    tile_counts,
    tiling,
)
from autotune.space import Config
from autotune.target import Target

ZERO = Const(0.0, FLOAT)

# (z, row, column) of an operand tile element -> (bounds condition or None, value)
Element = Callable[[Expr, Expr, Expr], tuple["Expr | None", Expr]]


@dataclass(frozen=True)
class Operand:
    """One GEMM operand as the kernel reads it: ``element`` gives a guarded element;
    ``flat`` (when rows are contiguous in memory) the element offset of (z, row, col)
    in ``buffer`` and ``row_len`` that row's length, for cp.async."""

    buffer: Buffer
    element: Element
    flat: Callable[[Expr, Expr, Expr], Expr] | None
    row_len: int
    rows: int


def _in(e: Expr, n: int) -> Expr:
    return cmp("<", e, n)


def _row_major(buf: Buffer, rows: int, cols: int, batched: bool) -> Operand:
    """``buf`` is (batch,) rows x cols row-major: element (z, r, c)."""
    def element(z: Expr, r: Expr, c: Expr) -> tuple[Expr | None, Expr]:
        idx = (z, r, c) if batched else (r, c)
        return all_of([_in(r, rows), _in(c, cols)]), Load(buf, idx)

    def flat(z: Expr, r: Expr, c: Expr) -> Expr:
        return (z * (rows * cols) if batched else Const(0)) + r * cols + c
    return Operand(buf, element, flat, cols, rows)


def _conv_weight(w: Buffer) -> Operand:
    """OIHW weights are K x (C*R*S) row-major."""
    k_, c_, r_, s_ = w.shape
    red = c_ * r_ * s_

    def element(z: Expr, row: Expr, col: Expr) -> tuple[Expr | None, Expr]:
        idx = (row, col // (r_ * s_), (col // s_) % r_, col % s_)
        return all_of([_in(row, k_), _in(col, red)]), Load(w, idx)

    def flat(z: Expr, row: Expr, col: Expr) -> Expr:
        return row * red + col
    return Operand(w, element, flat, red, k_)


def _im2col(wl: Workload, data: Buffer) -> Operand:
    """data[n] as the (C*R*S) x (OH*OW) im2col matrix, zero where a tap falls in the
    padding; for 1x1, stride 1, no padding that is data[n] itself, C x (H*W) row-major."""
    n_, c_, h_, w_ = data.shape
    r_, s_ = wl.dim("R"), wl.dim("S")
    (sh, sw), (ph, pw), (dh, dw) = wl.pair("stride"), wl.pair("pad"), wl.pair("dilation")
    oh, ow = wl.out_h, wl.out_w
    red, cols = c_ * r_ * s_, oh * ow
    plain = (r_, s_, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0)

    def element(z: Expr, row: Expr, col: Expr) -> tuple[Expr | None, Expr]:
        c, r, s = row // (r_ * s_), (row // s_) % r_, row % s_
        y = (col // ow) * sh + r * dh - ph
        x = (col % ow) * sw + s * dw - pw
        conds = [_in(row, red), _in(col, cols)]
        if ph:
            conds += [cmp(">=", y, 0), _in(y, h_)]
        if pw:
            conds += [cmp(">=", x, 0), _in(x, w_)]
        return all_of(conds), Load(data, (z, c, y, x))

    def flat(z: Expr, row: Expr, col: Expr) -> Expr:
        return z * (c_ * h_ * w_) + row * (h_ * w_) + col
    return Operand(data, element, flat if plain else None, cols, red)


def _buffers(wl: Workload) -> dict[str, Buffer]:
    return {a.name: Buffer(a.name, a.shape, a.dtype) for a in wl.arg_specs}


def lower(wl: Workload, target: Target, cfg: Config) -> PrimFunc:
    """The kernel of ``cfg`` as a loop AST: cp.async copies from sm_80 on."""
    return lower_tensorcore(wl, tiling(cfg), sm_version(limits(target)) >= 80)


def lower_tensorcore(wl: Workload, t: Tiling, async_copies: bool = True) -> PrimFunc:
    """The tensor-core kernel of ``wl`` tiled by ``t`` (see the module docstring); without
    ``async_copies`` (below sm_80) every fill is by element stores."""
    bufs = _buffers(wl)
    batch, M, N, K = gemm_dims(wl)
    if wl.op == "conv2d":
        a_op, b_op = _conv_weight(bufs["weight"]), _im2col(wl, bufs["data"])
    else:
        batched = wl.op == "batch_matmul"
        a_op = _row_major(bufs["A"], M, K, batched)
        b_op = _row_major(bufs["B"], K, N, batched)
    return _Kernel(wl, t, bufs, (batch, M, N, K), a_op, b_op, async_copies).func()


def _vector(op: Operand, t: Tiling, async_copies: bool) -> int:
    """Elements per cp.async for ``op``: the widest of VECTORS up to the knob that divides
    the operand's row length (so a vector never crosses a row end); 1 (element stores)
    when its rows are not contiguous or none divides."""
    if op.flat is None or not async_copies:
        return 1
    return next((v for v in VECTORS if v <= t.vector and op.row_len % v == 0), 1)


class _Kernel:
    def __init__(self, wl: Workload, t: Tiling, bufs: dict[str, Buffer],
                 dims: tuple[int, int, int, int], a_op: Operand, b_op: Operand,
                 async_copies: bool):
        self.wl, self.t, self.bufs = wl, t, bufs
        self.batch, self.M, self.N, self.K = dims
        self.a_op, self.b_op = a_op, b_op
        self.bz, self.by, self.bx, self.tx = Var("bz"), Var("by"), Var("bx"), Var("tx")
        split = t.split_k
        # the image (batch element) and the k range of the block: bz itself without a split
        self.image: Expr = self.bz if split == 1 else self.bz // split
        self.tiles_m, self.tiles_n = tile_counts(self.M, self.N, t.bm, t.bn)
        self.per_split = k_tiles(t, self.K)[1]
        self.n_tiles = output_tiles(self.batch, self.M, self.N, t.bm, t.bn)
        self.workspaces: tuple[Buffer, ...] = ()
        if split > 1:
            self.partials = Buffer("split_partials", (split * self.n_tiles * t.bm * t.bn,),
                                   FLOAT)
            self.counters = Buffer("split_counters", (self.n_tiles,), FLOAT)
            self.workspaces = (self.partials, self.counters)
        warp = self.tx // WARP
        self.wm = warp // t.warps[1]
        self.wn = warp % t.warps[1]
        dt = wl.dtype
        m = t.mma[0]
        self.a_sh = Buffer("A_shared", (t.stages, t.bm, t.lda), dt, Scope.SHARED)
        self.b_sh = Buffer("B_shared", (t.stages, t.block_k, t.ldb), dt, Scope.SHARED)
        self.c_sh = Buffer("C_staging", (t.warps[0] * m, t.ldc), FLOAT, Scope.SHARED)
        self.fa = Buffer("a_frag", (t.frags[0],), dt, Scope.WMMA_A)
        self.fb = Buffer("b_frag", (t.frags[1],), dt, Scope.WMMA_B)
        self.acc = Buffer("acc", t.frags, FLOAT, Scope.WMMA_ACC)
        self.va, self.vb = _vector(a_op, t, async_copies), _vector(b_op, t, async_copies)
        self.asynchronous = max(self.va, self.vb) > 1

    # ------------------------------------------------------------------ whole kernel
    def func(self) -> PrimFunc:
        t = self.t
        epilogue = self._epilogue() if t.split_k == 1 else self._split_epilogue()
        body: Stmt = Seq([self._init(), self._main_loop(), epilogue])
        for frag in (self.acc, self.fb, self.fa):
            body = Allocate(frag, body)
        for sh in (self.c_sh, self.b_sh, self.a_sh):
            body = Allocate(sh, body)
        body = For(self.tx, t.threads, ForKind.THREAD_X, body)
        body = For(self.bx, self.tiles_n, ForKind.BLOCK_X, body)
        body = For(self.by, self.tiles_m, ForKind.BLOCK_Y, body)
        body = For(self.bz, self.batch * t.split_k, ForKind.BLOCK_Z, body)
        args = tuple(self.bufs.values())
        return PrimFunc(f"at_{self.wl.op}", args, body, self.workspaces)

    def _init(self) -> Stmt:
        i, j = Var("i_init"), Var("j_init")
        fill = MmaFill(self.acc, (i, j), 0.0, self.t.mma)
        return _unrolled(i, self.t.frags[0], _unrolled(j, self.t.frags[1], fill))

    # ------------------------------------------------------------------ main loop
    def _main_loop(self) -> Stmt:
        """One stage: fill, barrier, compute, barrier per k tile. S stages (cp.async
        multi-buffering): tiles 0..S-2 are in flight before the loop; step ko waits until
        tile ko has landed (at most S-2 newer groups pending), a barrier publishes it and
        orders every thread's reads of the stage about to be refilled (read in step ko-1)
        before the fill of tile ko+S-1, then computes tile ko while that copy is in flight:
        one barrier per k tile."""
        t = self.t
        tiles = self.per_split  # the block's k tiles (all of them without a split)
        ko = Var("ko")
        commit = [AsyncCommit()] if self.asynchronous else []
        if t.stages == 1:
            step = [self._fill(ko, Const(0))]
            if self.asynchronous:
                step += [AsyncCommit(), AsyncWait(0)]
            step += [Sync(), self._compute(Const(0)), Sync()]
            return For(ko, tiles, ForKind.SERIAL, Seq(step))
        ahead = t.stages - 1
        head: list[Stmt] = []
        for kt in range(min(ahead, tiles)):
            head += [self._fill(Const(kt), Const(kt)), *commit]
        head += commit * max(0, ahead - tiles)  # one group per tile keeps the waits' count
        nxt = ko + ahead
        prefetch: Stmt = Seq([])
        if tiles > ahead:
            prefetch = IfThenElse(_in(nxt, tiles), self._fill(nxt, nxt % t.stages))
        step = []
        if self.asynchronous:
            step.append(AsyncWait(t.stages - 2))
        step += [Sync(), prefetch, *commit, self._compute(ko % t.stages)]
        return Seq([*head, For(ko, tiles, ForKind.SERIAL, Seq(step))])

    def _fill(self, kt: Expr, stage: Expr) -> Stmt:
        """Fill stage ``stage`` of both shared tiles with the block's k tile ``kt``."""
        t = self.t
        z = self.image
        if t.split_k > 1:
            kt = self.bz % t.split_k * self.per_split + kt
        k0 = kt * t.block_k
        row0, col0 = self.by * t.bm, self.bx * t.bn
        a = self._fill_tile("a", self.a_sh, stage, t.bm, t.block_k, t.lda, self.a_op, self.va,
                            lambda r, c: (z, row0 + r, k0 + c))
        b = self._fill_tile("b", self.b_sh, stage, t.block_k, t.bn, t.ldb, self.b_op, self.vb,
                            lambda r, c: (z, k0 + r, col0 + c))
        return Seq([a, b])

    def _fill_tile(self, tag: str, dst: Buffer, stage: Expr, rows: int, cols: int, ld: int,
                   op: Operand, vec: int, at: Callable[[Expr, Expr], tuple[Expr, Expr, Expr]]
                   ) -> Stmt:
        """Spread the copy of a rows x cols tile (element (r, c) from ``op`` at
        ``at(r, c)``) over the block's threads, consecutive threads on consecutive
        columns."""
        threads = self.t.threads
        per_row = cols // vec
        total = rows * per_row
        it = Var(f"{tag}_fill")
        v = self.tx + it * threads
        r, c = v // per_row, (v % per_row) * vec
        cond, value = op.element(*at(r, c))
        stmt: Stmt
        if vec > 1:
            assert op.flat is not None
            stmt = AsyncCopy(dst, (stage * rows + r) * ld + c, op.buffer, op.flat(*at(r, c)),
                             vec, cond)
        else:
            idx = (stage, r, c)
            store = Store(dst, idx, value)
            stmt = store if cond is None else IfThenElse(cond, store, Store(dst, idx, ZERO))
        if total % threads:
            stmt = IfThenElse(_in(v, total), stmt)
        return _unrolled(it, -(-total // threads), stmt)

    def _compute(self, stage: Expr) -> Stmt:
        """The block's MMAs on one shared stage: per MMA k step, each warp loads its FM
        A and FN B fragments and accumulates their FM x FN products."""
        t = self.t
        m, n, k = t.mma
        fm, fn = t.frags
        kk, i, j = Var("kk"), Var("i"), Var("j")
        i2, j2 = Var("i_mma"), Var("j_mma")
        a_row = self.wm * (fm * m) + i * m
        a_off = (stage * t.bm + a_row) * t.lda + kk * k
        b_off = (stage * t.block_k + kk * k) * t.ldb + self.wn * (fn * n) + j * n
        loads = Seq([
            _unrolled(i, fm, MmaLoad(self.fa, (i,), self.a_sh, a_off, t.lda, "row", t.mma)),
            _unrolled(j, fn, MmaLoad(self.fb, (j,), self.b_sh, b_off, t.ldb, "row", t.mma)),
            _unrolled(i2, fm, _unrolled(j2, fn, MmaSync(self.acc, (i2, j2), self.fa, (i2,),
                                                         self.fb, (j2,), t.mma))),
        ])
        kind = ForKind.UNROLLED if t.unroll else ForKind.SERIAL
        return For(kk, t.block_k // k, kind, loads)

    # ------------------------------------------------------------------ epilogue
    def _epilogue(self) -> Stmt:
        """Per fragment (i, j): every warp stores its accumulator into the staging tile,
        then its lanes read it back, lane l taking elements l, l+32, ... (row-major), and
        write the output."""
        t = self.t
        m, n, _ = t.mma
        fm, fn = t.frags
        i, j, e = Var("i_out"), Var("j_out"), Var("e")
        idx = self.tx % WARP + e * WARP
        r, c = idx // n, idx % n
        row = self.by * t.bm + self.wm * (fm * m) + i * m + r
        col = self.bx * t.bn + self.wn * (fn * n) + j * n + c
        staged = Load(self.c_sh, (self.wm * m + r, self.wn * n + c))
        out = self.bufs["out"]
        out_idx = self._out_index(row, col)
        store: Stmt = Store(out, out_idx, self._apply(staged, row, col, out_idx))
        guard = all_of([_in(row, self.M), _in(col, self.N)])
        if guard is not None:
            store = IfThenElse(guard, store)
        per_lane = m * n // WARP
        chunk = Seq([
            MmaStore(self.c_sh, self.wm * (m * t.ldc) + self.wn * n, t.ldc, self.acc, (i, j),
                     t.mma),
            Sync(),
            _unrolled(e, per_lane, store),
            Sync(),
        ])
        return _unrolled(i, fm, _unrolled(j, fn, chunk))

    def _split_epilogue(self) -> Stmt:
        """Split-K (see the module docstring): the partial tile out, the arrival counted,
        and the last block's reduction."""
        t = self.t
        m, n, _ = t.mma
        fm, fn = t.frags
        split, area = t.split_k, t.bm * t.bn
        tile = (self.image * self.tiles_m + self.by) * self.tiles_n + self.bx
        i, j = Var("i_out"), Var("j_out")
        row0 = self.wm * (fm * m) + i * m
        offset = ((self.bz % split * self.n_tiles + tile) * area + row0 * t.bn
                  + self.wn * (fn * n) + j * n)
        partial = _unrolled(i, fm, _unrolled(j, fn, MmaStore(
            self.partials, offset, t.bn, self.acc, (i, j), t.mma)))
        first = cmp("==", self.tx, 0)
        flag = (Const(0), Const(0))  # the staging tile is free: partials went to global
        arrive = IfThenElse(first, Seq([
            AtomicAdd(self.c_sh, flag, self.counters, (tile,), 1.0), Fence()]))
        last = cmp("==", Load(self.c_sh, flag), Const(float(split - 1), FLOAT))
        reset = IfThenElse(first, Store(self.counters, (tile,), ZERO))
        return Seq([partial, Fence(), Sync(), arrive, Sync(),
                    IfThenElse(last, Seq([self._reduce(tile), reset]))])

    def _reduce(self, tile: Expr) -> Stmt:
        """The last block: each output element of the tile, consecutive threads on
        consecutive columns, the sum of its S partials in split order, then the
        epilogue."""
        t = self.t
        area = t.bm * t.bn
        e = Var("e")
        idx = self.tx + e * t.threads
        row, col = self.by * t.bm + idx // t.bn, self.bx * t.bn + idx % t.bn
        total: Expr = Load(self.partials, (tile * area + idx,))
        for s in range(1, t.split_k):
            total = total + Load(self.partials, ((s * self.n_tiles + tile) * area + idx,))
        out_idx = self._out_index(row, col)
        store: Stmt = Store(self.bufs["out"], out_idx, self._apply(total, row, col, out_idx))
        guard = all_of([_in(row, self.M), _in(col, self.N)])
        if guard is not None:
            store = IfThenElse(guard, store)
        return For(e, area // t.threads, ForKind.SERIAL, store)

    def _out_index(self, row: Expr, col: Expr) -> tuple[Expr, ...]:
        op = self.wl.op
        if op == "conv2d":
            ow = self.wl.out_w
            return (self.image, row, col // ow, col % ow)
        if op == "batch_matmul":
            return (self.image, row, col)
        return (row, col)

    def _apply(self, v: Expr, row: Expr, col: Expr, out_idx: tuple[Expr, ...]) -> Expr:
        return epilogue_value(self.wl, self.bufs, v, row, col, out_idx)


def epilogue_value(wl: Workload, bufs: dict[str, Buffer], v: Expr, row: Expr, col: Expr,
                   out_idx: tuple[Expr, ...]) -> Expr:
    """The workload's epilogue on GEMM result ``v`` (float32) at (``row``, ``col``), per
    channel: the output's row for an NCHW conv2d (K x pixels), its column for matmul and
    an NHWC conv2d (pixels x K)."""
    ch = row if wl.op == "conv2d" and wl.layout == NCHW else col
    return apply_stages(v, wl.epilogue, ch, lambda name, c: Load(bufs[name], (c,)),
                        lambda: Load(bufs["residual"], out_idx))


def _unrolled(var: Var, extent: int, body: Stmt) -> For:
    return For(var, extent, ForKind.UNROLLED, body)
