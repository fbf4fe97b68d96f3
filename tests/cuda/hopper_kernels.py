"""A hand-built warp-specialized wgmma GEMM (loop AST with TMA, mbarrier, wgmma and
setmaxnreg statements), with switches that plant each fault the execution model must
catch; shared by the execution-model and the cost-model tests.

One block computes C (64*consumers x N, float32) = A (64*consumers x K) @ B: warpgroup 0's
thread 0 copies each 64-wide k tile of A and B into a ring of ``stages`` with TMA (128-byte
swizzle), consumer warpgroup c waits for the stage, multiplies its 64 rows with four
m64nNk16 wgmmas and frees the stage. B is K x N row-major (MN-major operand, 64-column
boxes) or, with ``b_major="k"``, given as its N x K transpose.
"""
from __future__ import annotations

import numpy as np

import autotune
from autotune.codegen.cuda.compiler import prepare_kernel
from autotune.ir.expr import FLOAT, Const, Var, cmp
from autotune.ir.stmt import (
    WARPGROUP,
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    MbarrierArrive,
    MbarrierInit,
    MbarrierWait,
    PrimFunc,
    Scope,
    Seq,
    SetMaxNReg,
    SmemMatrix,
    Store,
    Sync,
    TensorMap,
    TmaLoad,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from autotune.ops.dtypes import MBARRIER, to_float32, to_storage

TARGET = autotune.Target("cuda -arch=sm_90a")
BK = 64      # halves per 128-byte row: one k tile
FAULTS = frozenset({
    "no_full_wait", "flip_parity", "no_empty_wait", "wait_one", "no_free", "a_unswizzled",
    "expect_less", "expect_more", "double_arrive", "no_fence", "no_dec", "no_init",
    "no_init_sync", "a_misaligned", "desc_misaligned", "warp_skips_wgmma",
    "offset_per_thread", "no_zero", "thread_fills_a", "thread_peeks", "no_b_copy",
    "a_past_end", "b_past_end"})


def ws_gemm(K: int = 128, N: int = 64, *, stages: int = 2, consumers: int = 1,
            dtype: str = "float16", b_major: str = "mn", faults: frozenset[str] = frozenset(),
            first_wait: bool = False, prepare: bool = True):
    """(func, body, launch): the kernel, its body as the model runs it (after the CUDA passes
    unless ``prepare`` is false) and its launch, with ``faults`` planted (see FAULTS).
    ``first_wait``: the producer waits on "empty" from the first round on, with parity 1 on
    the fresh barriers (CUTLASS's form), rather than from the second."""
    assert faults <= FAULTS, faults - FAULTS
    M, kt_n = 64 * consumers, K // BK
    A = Buffer("A", (M, K), dtype)
    B = Buffer("B", (K, N) if b_major == "mn" else (N, K), dtype)
    C = Buffer("C", (M, N), FLOAT)
    a_elems, b_elems = M * BK, N * BK
    a_sh = Buffer("A_sh", (stages * a_elems,), dtype, Scope.SHARED)
    b_sh = Buffer("B_sh", (stages * b_elems,), dtype, Scope.SHARED)
    full = Buffer("full", (stages,), MBARRIER, Scope.SHARED)
    empty = Buffer("empty", (stages,), MBARRIER, Scope.SHARED)
    acc = Buffer("acc", (N // 2,), FLOAT, Scope.LOCAL)
    tm_a = TensorMap("tm_A", A, (M, BK), 0 if "a_unswizzled" in faults else 128)
    tm_b = TensorMap("tm_B", B, (BK, 64) if b_major == "mn" else (N, BK), 128)
    tx, kt, s = Var("tx"), Var("kt"), Var("s")
    stage, phase = kt % stages, kt // stages % 2
    nbytes = (a_elems + b_elems) * 2 + {"expect_less": -64 * 64 * 2,
                                        "expect_more": 16}.get(next(iter(
                                            faults & {"expect_less", "expect_more"}), ""), 0)
    if "thread_fills_a" in faults:  # the producer's threads store A's stages themselves
        nbytes -= a_elems * 2
    if "no_b_copy" in faults:       # and B arrives from nowhere
        nbytes -= b_elems * 2

    # ---------------------------------------------------------------- producer
    j = Var("j")
    if b_major == "mn":
        copy_b = For(j, N // 64, ForKind.UNROLLED, TmaLoad(
            b_sh, stage * b_elems + j * (BK * 64), tm_b, (kt * BK, j * 64), full, stage))
    else:
        copy_b = TmaLoad(b_sh, stage * b_elems, tm_b, (Const(0), kt * BK), full, stage)
    a_dst = stage * a_elems + (8 if "a_misaligned" in faults else 0) + (
        stages * a_elems if "a_past_end" in faults else 0)
    copies = [MbarrierArrive(full, stage, nbytes)]
    if "double_arrive" in faults:
        copies.append(MbarrierArrive(full, stage))
    if "thread_fills_a" not in faults:
        copies.append(TmaLoad(a_sh, a_dst, tm_a, (Const(0), kt * BK), full, stage))
    if "no_b_copy" not in faults:
        copies.append(copy_b)
    if first_wait:
        copies.insert(0, MbarrierWait(empty, stage, (phase + 1) % 2))
    elif "no_empty_wait" not in faults:
        copies.insert(0, IfThenElse(cmp(">=", kt, stages),
                                    MbarrierWait(empty, stage, (phase + 1) % 2)))
    i = Var("i")
    fill_a = For(i, stages * a_elems // WARPGROUP, ForKind.SERIAL,
                 Store(a_sh, (i * WARPGROUP + tx,), Const(0.0, FLOAT)))
    producer = Seq([*([] if "no_dec" in faults else [SetMaxNReg(40, False)]),
                    *([fill_a] if "thread_fills_a" in faults else []),
                    IfThenElse(cmp("==", tx, 0), For(kt, kt_n, ForKind.SERIAL, Seq(copies)))])

    # ---------------------------------------------------------------- consumers
    c = tx // WARPGROUP - 1
    kk, r = Var("kk"), Var("r")
    a_off = stage * a_elems + c * (64 * BK) + kk * 16
    if "desc_misaligned" in faults:  # a row into the swizzle pattern
        a_off = a_off + BK
    if "offset_per_thread" in faults:
        a_off = a_off + (tx % 2) * 1024
    a = SmemMatrix(a_sh, a_off, "k", 128, 16, 1024)
    b_off = stage * b_elems + (stages * b_elems if "b_past_end" in faults else 0)
    if b_major == "mn":
        b = SmemMatrix(b_sh, b_off + kk * (16 * 64), "mn", 128, BK * 64 * 2, 1024)
    else:
        b = SmemMatrix(b_sh, b_off + kk * 16, "k", 128, 16, 1024)
    mma: object = For(kk, BK // 16, ForKind.UNROLLED, Wgmma(acc, (), a, b, N))
    if "warp_skips_wgmma" in faults:
        mma = IfThenElse(cmp("<", tx % WARPGROUP, 96), mma)
    wait_parity = (phase + 1) % 2 if "flip_parity" in faults else phase
    peek = Store(acc, (Const(0),), acc[0] + b_sh[stage * b_elems] * Const(0.0, FLOAT))
    step = [*([peek] if "thread_peeks" in faults else []),
            *([] if "no_full_wait" in faults else [MbarrierWait(full, stage, wait_parity)]),
            *([] if "no_fence" in faults else [WgmmaFence()]), mma, WgmmaCommit(),
            WgmmaWait(1 if "wait_one" in faults else 0)]
    if "no_free" not in faults:
        step.append(IfThenElse(cmp("==", tx % WARPGROUP, 0), MbarrierArrive(empty, stage)))
    lane, warp = tx % 32, tx % WARPGROUP // 32
    row = c * 64 + warp * 16 + lane // 4 + r % 4 // 2 * 8
    col = r // 4 * 8 + lane % 4 * 2 + r % 2
    consumer = Allocate(acc, Seq([
        SetMaxNReg(232 if consumers == 2 else 240, True),
        *([] if "no_zero" in faults else [
            For(r, N // 2, ForKind.UNROLLED, Store(acc, (r,), Const(0.0, FLOAT)))]),
        For(kt, kt_n, ForKind.SERIAL, Seq(step)),
        For(r, N // 2, ForKind.UNROLLED, Store(C, (row, col), acc[r]))]))

    init = IfThenElse(cmp("==", tx, 0), For(s, stages, ForKind.UNROLLED, Seq([
        MbarrierInit(full, s, 1), MbarrierInit(empty, s, consumers)])))
    body = Seq([*([] if "no_init" in faults else [init]),
                *([] if "no_init_sync" in faults else [Sync()]),
                IfThenElse(cmp("<", tx, WARPGROUP), producer, consumer)])
    for buf in (empty, full, b_sh, a_sh):
        body = Allocate(buf, body)
    bx = Var("bx")
    body = For(bx, 1, ForKind.BLOCK_X,
               For(tx, WARPGROUP * (1 + consumers), ForKind.THREAD_X, body))
    func = PrimFunc("ws_gemm", (A, B, C), body)
    run_body, launch = prepare_kernel(func, TARGET)
    return func, (run_body if prepare else func.body), launch


def gemm_args(func, seed: int = 0):
    """Inputs in [-1, 1) in the operands' storage form, and a NaN output."""
    rng = np.random.default_rng(seed)
    A, B, C = func.args
    return [to_storage(rng.uniform(-1, 1, b.shape).astype(np.float32), b.dtype)
            for b in (A, B)] + [np.full(C.shape, np.nan, np.float32)]


def gemm_reference(func, args) -> np.ndarray:
    A, B, _ = func.args
    a = to_float32(args[0], A.dtype).astype(np.float64)
    b = to_float32(args[1], B.dtype).astype(np.float64)
    return a @ (b if B.shape[0] == A.shape[1] else b.T)


def tma_gemm(N: int = 64, *, barrier_after_wait: bool = True, everyone_waits: bool = False):
    """(func, body, launch): one warpgroup, one 64 x 64 k tile, no specialisation: thread 0
    copies A and B with TMA and waits for them, a block barrier (``barrier_after_wait``)
    hands what it saw to the others (or each thread waits itself: ``everyone_waits``), then
    the warpgroup multiplies."""
    A, B = Buffer("A", (64, BK), "float16"), Buffer("B", (BK, N), "float16")
    C = Buffer("C", (64, N), FLOAT)
    a_sh = Buffer("A_sh", (64 * BK,), "float16", Scope.SHARED)
    b_sh = Buffer("B_sh", (N * BK,), "float16", Scope.SHARED)
    full = Buffer("full", (1,), MBARRIER, Scope.SHARED)
    acc = Buffer("acc", (N // 2,), FLOAT, Scope.LOCAL)
    tx, j, kk, r = Var("tx"), Var("j"), Var("kk"), Var("r")
    zero = Const(0)
    copy = Seq([MbarrierArrive(full, zero, (64 + N) * BK * 2),
                TmaLoad(a_sh, zero, TensorMap("tm_A", A, (64, BK), 128), (zero, zero), full,
                        zero),
                For(j, N // 64, ForKind.UNROLLED, TmaLoad(
                    b_sh, j * (BK * 64), TensorMap("tm_B", B, (BK, 64), 128), (zero, j * 64),
                    full, zero))])
    wait = MbarrierWait(full, zero, zero)
    a = SmemMatrix(a_sh, kk * 16, "k", 128, 16, 1024)
    b = SmemMatrix(b_sh, kk * (16 * 64), "mn", 128, BK * 64 * 2, 1024)
    lane, warp = tx % 32, tx // 32
    row, col = warp * 16 + lane // 4 + r % 4 // 2 * 8, r // 4 * 8 + lane % 4 * 2 + r % 2
    body = Seq([
        IfThenElse(cmp("==", tx, 0), MbarrierInit(full, zero, 1)), Sync(),
        IfThenElse(cmp("==", tx, 0), Seq([copy, *([] if everyone_waits else [wait])])),
        *([wait] if everyone_waits else []), *([Sync()] if barrier_after_wait else []),
        Allocate(acc, Seq([
            For(r, N // 2, ForKind.UNROLLED, Store(acc, (r,), Const(0.0, FLOAT))),
            WgmmaFence(), For(kk, BK // 16, ForKind.UNROLLED, Wgmma(acc, (), a, b, N)),
            WgmmaCommit(), WgmmaWait(0),
            For(r, N // 2, ForKind.UNROLLED, Store(C, (row, col), acc[r]))]))])
    for buf in (full, b_sh, a_sh):
        body = Allocate(buf, body)
    body = For(Var("bx"), 1, ForKind.BLOCK_X, For(tx, WARPGROUP, ForKind.THREAD_X, body))
    func = PrimFunc("tma_gemm", (A, B, C), body)
    run_body, launch = prepare_kernel(func, TARGET)
    return func, run_body, launch
