"""Hand-built tensor-core and cp.async kernels (loop AST with Mma and Async statements),
shared by the execution-model and the cost-model tests."""
from __future__ import annotations

import numpy as np

from autotune.codegen.cuda.passes import Launch
from autotune.ir.expr import Const, Var, cmp
from autotune.ir.stmt import (
    Allocate,
    AsyncCommit,
    AsyncCopy,
    AsyncWait,
    Buffer,
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
    Store,
    Sync,
)
from autotune.ops.dtypes import to_storage


def launch_1d(body, threads: int, blocks: int = 1):
    """``body(bx, tx)`` under one-dimensional block and thread loops, and its launch."""
    bx, tx = Var("bx"), Var("tx")
    return (For(bx, blocks, ForKind.BLOCK_X, For(tx, threads, ForKind.THREAD_X, body(bx, tx))),
            Launch((blocks, 1, 1), (threads, 1, 1), 0))


def random_half(rng, shape, dtype):
    """Values in [-1, 1) in ``dtype``'s storage form."""
    return to_storage(rng.uniform(-1, 1, shape).astype(np.float32), dtype)


def wmma_matmul(shape=(16, 16, 16), dtype="float16", ksteps=1, b_layout="row", *,
                threads=32, lda=None, a_offset=0, fill=True, barrier=True, mma_guard=None,
                a_offset_of=None, warp1_copies=False, acc_index=0):
    """C = A @ B by warp 0: fragments through the tensor cores, the accumulator stored to
    shared memory, then copied out by every thread. B is K x N row-major, or for "col"
    stored as its transpose (N x K). ``lda`` pads A's rows. ``warp1_copies``: only warp 1
    (threads 32..63) copies the result out."""
    m, n, k = shape
    K = k * ksteps
    lda = lda or K
    A = Buffer("A", (m, lda), dtype)
    B = Buffer("B", (K, n) if b_layout == "row" else (n, K), dtype)
    C = Buffer("C", (m, n), dtype)
    fa, fb = Buffer("fa", (1,), dtype, Scope.WMMA_A), Buffer("fb", (1,), dtype, Scope.WMMA_B)
    fc = Buffer("fc", (1,), "float32", Scope.WMMA_ACC)
    csh = Buffer("c_sh", (m * n,), "float32", Scope.SHARED)
    kk = Var("kk")
    z = (Const(0),)

    def body(bx, tx):
        a_off = kk * k + a_offset if a_offset_of is None else a_offset_of(tx)
        b_off = kk * k * n if b_layout == "row" else kk * k
        step = Seq([MmaLoad(fa, z, A, a_off, lda, "row", shape),
                    MmaLoad(fb, z, B, b_off, n if b_layout == "row" else K, b_layout, shape),
                    MmaSync(fc, z, fa, z, fb, z, shape)])
        mma = Seq([*([MmaFill(fc, (Const(acc_index),), 0.0, shape)] if fill else []),
                   For(kk, ksteps, ForKind.SERIAL, step), MmaStore(csh, Const(0), n, fc, z, shape)])
        if mma_guard is not None:
            mma = IfThenElse(mma_guard(tx), mma)
        elif threads > 32:
            mma = IfThenElse(cmp("<", tx, 32), mma)  # warp 0 computes
        i = Var("i")
        width = 32 if warp1_copies else threads
        e = i * width + (tx - 32 if warp1_copies else tx)
        copy = For(i, m * n // width, ForKind.SERIAL, Store(C, (e // n, e % n), csh[e]))
        if warp1_copies:
            copy = IfThenElse(cmp(">=", tx, 32), copy)
        parts = [mma, *([Sync()] if barrier else []), copy]
        return Allocate(csh, Allocate(fa, Allocate(fb, Allocate(fc, Seq(parts)))))
    stmt, launch = launch_1d(body, threads)
    return PrimFunc("wmma", (A, B, C), stmt), launch


T = 256  # elements per stage: 32 threads x 8 halves (16 bytes each)


def async_pipeline(stages=4, dtype="float16", *, wait=1, first_sync=True, last_sync=True,
                   commit=True, dst_skew=0, n_src=None, valid=None):
    """Stream ``x`` through two shared stages with cp.async (double buffering): stage s+1 is
    in flight while stage s is read; out[s*T + j] = 2 * x[s*T + (j + 8) % T] (each thread
    reads its neighbour's copy, so the barrier after the wait matters)."""
    x = Buffer("x", (n_src or stages * T,), dtype)
    out = Buffer("out", (stages * T,), dtype)
    sh = Buffer("sh", (2 * T,), dtype, Scope.SHARED)
    s, i = Var("s"), Var("i")

    def body(bx, tx):
        def copy(stage, buf):
            return AsyncCopy(sh, buf * T + tx * 8 + dst_skew, x, stage * T + tx * 8, 8,
                             None if valid is None else valid(tx, stage))
        j = tx * 8 + i
        loop = Seq([IfThenElse(cmp("<", s + 1, stages), copy(s + 1, (s + 1) % 2)),
                    *([AsyncCommit()] if commit else []), AsyncWait(wait),
                    *([Sync()] if first_sync else []),
                    For(i, 8, ForKind.SERIAL,
                        Store(out, (s * T + j,), sh[(s % 2) * T + (j + 8) % T] * Const(2.0))),
                    *([Sync()] if last_sync else [])])
        # (the barrier after the prologue leaves only the wait's landing to order the reads)
        return Allocate(sh, Seq([copy(Const(0), Const(0)), AsyncCommit(), Sync(),
                                 For(s, stages, ForKind.SERIAL, loop)]))
    stmt, launch = launch_1d(body, 32)
    return PrimFunc("pipe", (x, out), stmt), launch


def replace_stmts(s, match, new):
    """``s`` with ``new(x)`` for every statement ``x`` that ``match``es."""
    if match(s):
        return new(s)
    if isinstance(s, For):
        return For(s.var, s.extent, s.kind, replace_stmts(s.body, match, new))
    if isinstance(s, Seq):
        return Seq([replace_stmts(c, match, new) for c in s.stmts])
    if isinstance(s, Allocate):
        return Allocate(s.buffer, replace_stmts(s.body, match, new))
    if isinstance(s, IfThenElse):
        return IfThenElse(s.cond, replace_stmts(s.then, match, new),
                          None if s.else_ is None else replace_stmts(s.else_, match, new))
    return s
