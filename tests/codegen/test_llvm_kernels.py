"""LLVM code generation: hand-built loop nests (serial, vectorized, unrolled, parallel,
register tiles, guards, gathers, fallbacks) compiled and checked against numpy."""
from __future__ import annotations

import os
import time
from types import SimpleNamespace

import llvmlite.binding as llvm
import numpy as np
import pytest

from autotune.codegen.llvm.compiler import generate_llvm_ir
from autotune.codegen.llvm.runtime import CpuKernel, compile_llvm
from autotune.ir.expr import And, Const, Expr, Select, Var, cmp, maximum, minimum
from autotune.ir.stmt import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Scope,
    Seq,
    Store,
    Sync,
)
from autotune.ops import aligned_empty

S, V, U, P = ForKind.SERIAL, ForKind.VECTORIZED, ForKind.UNROLLED, ForKind.PARALLEL


@pytest.fixture(scope="module")
def target() -> SimpleNamespace:
    """A stand-in for ``autotune.target.Target('llvm')``: the host CPU."""
    llvm.initialize_native_target()
    feats = llvm.get_host_cpu_features().flatten()
    return SimpleNamespace(mcpu=llvm.get_host_cpu_name(), features=feats,
                           cores=len(os.sched_getaffinity(0)),
                           vector_bits=512 if "+avx512f" in feats else 256)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape).astype(np.float32)


def run(f: PrimFunc, target: SimpleNamespace, *inputs: np.ndarray) -> tuple[CpuKernel, np.ndarray]:
    k = compile_llvm(f, target)
    out = np.full(f.args[-1].shape, np.nan, np.float32)
    k(*inputs, out)
    return k, out


def assert_close(got: np.ndarray, ref: np.ndarray) -> None:
    err = np.abs(got.astype(np.float64) - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err < 1e-4, err


def loops(spec: list[tuple[Var, int, ForKind]], body) -> For:  # type: ignore[no-untyped-def]
    for v, n, kind in reversed(spec):
        body = For(v, n, kind, body)
    return body


# -- matmul variants -----------------------------------------------------------------
def matmul(M: int, N: int, K: int, *, lanes: int = 0, unroll_k: bool = False,
           par_i: bool = False) -> PrimFunc:
    """C = A @ B with C zeroed first; optionally j split by ``lanes`` and vectorized."""
    A, B, C = Buffer("A", (M, K)), Buffer("B", (K, N)), Buffer("C", (M, N))
    i, j, k, i2, j2 = Var("i"), Var("j"), Var("k"), Var("i"), Var("j")
    init = loops([(i2, M, S), (j2, N, S)], Store(C, (i2, j2), Const(0.0)))
    kk = (k, K, U if unroll_k else S)
    ik = (i, M, P if par_i else S)
    if lanes:
        jo, v = Var("jo"), Var("v")
        col = jo * lanes + v
        upd = Store(C, (i, col), C[i, col] + A[i, k] * B[k, col])
        nest = loops([ik, (jo, N // lanes, S), kk, (v, lanes, V)], upd)
    else:
        nest = loops([ik, (j, N, S), kk], Store(C, (i, j), C[i, j] + A[i, k] * B[k, j]))
    return PrimFunc("matmul", (A, B, C), Seq([init, nest]))


@pytest.mark.parametrize("opts", [
    {}, {"lanes": 16}, {"lanes": 32}, {"lanes": 5}, {"unroll_k": True},
    {"par_i": True}, {"lanes": 16, "unroll_k": True, "par_i": True},
], ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()) or "serial")
def test_matmul_variants(target, opts):
    M, K = 13, 8
    N = 5 * 7 if opts.get("lanes") == 5 else 64
    f = matmul(M, N, K, **opts)
    a, b = rand(M, K), rand(K, N)
    k, c = run(f, target, a, b)
    assert_close(c, a.astype(np.float64) @ b)
    if opts.get("lanes"):
        assert f"<{opts['lanes']} x float>" in k.source
    if opts.get("par_i"):
        assert "GOMP_parallel" in k.source
    else:
        assert "GOMP_parallel" not in k.source


def test_vectorized_source_uses_fast_math_and_512_bit_attrs(target):
    text = generate_llvm_ir(matmul(4, 64, 4, lanes=16), target)
    assert "load <16 x float>" in text and "store <16 x float>" in text
    assert "fmul reassoc nsz arcp contract <16 x float>" in text
    assert "nnan" not in text and "ninf" not in text
    assert f'"target-cpu"="{target.mcpu}"' in text and "noalias align 64" in text
    if target.vector_bits == 512:
        assert '"prefer-vector-width"="512"' in text
        assert '"min-legal-vector-width"="512"' in text


# -- register tile with a tail guard --------------------------------------------------
def tiled_matmul(M: int, N: int, K: int, *, rows: int = 4, cols: int = 32, lanes: int = 16,
                 par: bool = False) -> PrimFunc:
    """A rows x cols LOCAL accumulator tile per (io, jo), k innermost-but-one, j vectorized;
    rows past M (a non-dividing tail) are read as zeros and never written back."""
    A, B, C = Buffer("A", (M, K)), Buffer("B", (K, N)), Buffer("C", (M, N))
    acc = Buffer("acc", (rows, cols), scope=Scope.LOCAL)
    io, jo, k = Var("io"), Var("jo"), Var("k")

    def tile(body_of) -> For:  # type: ignore[no-untyped-def]
        ii, jv, v = Var("ii"), Var("jv"), Var("v")
        return loops([(ii, rows, U), (jv, cols // lanes, U), (v, lanes, V)],
                     body_of(ii, jv * lanes + v))

    def row(ii: Expr) -> Expr:
        return io * rows + ii

    init = tile(lambda ii, c: Store(acc, (ii, c), Const(0.0)))
    a_val = lambda ii: Select(cmp("<", row(ii), M), A[row(ii), k], Const(0.0))  # noqa: E731
    upd = For(k, K, S, tile(lambda ii, c: Store(
        acc, (ii, c), acc[ii, c] + a_val(ii) * B[k, jo * cols + c])))
    ii, jv, v = Var("ii"), Var("jv"), Var("v")
    back = For(ii, rows, U, IfThenElse(cmp("<", row(ii), M), loops(
        [(jv, cols // lanes, U), (v, lanes, V)],
        Store(C, (row(ii), jo * cols + jv * lanes + v), acc[ii, jv * lanes + v]))))
    body = Allocate(acc, Seq([init, upd, back]))
    nest = loops([(io, -(-M // rows), P if par else S), (jo, N // cols, S)], body)
    return PrimFunc("tiled_matmul", (A, B, C), nest)


@pytest.mark.parametrize("par", [False, True])
def test_register_tile_with_tail_guard(target, par):
    M, N, K = 97, 64, 24
    f = tiled_matmul(M, N, K, par=par)
    a, b = rand(M, K), rand(K, N)
    k, c = run(f, target, a, b)
    assert_close(c, a.astype(np.float64) @ b)
    assert "alloca [128 x float], align 64" in k.source
    assert "<16 x float>" in k.source


# -- guards, gathers, masks -----------------------------------------------------------
def padded_conv(H: int, W: int, lanes: int) -> PrimFunc:
    """3x3 'same' convolution of a single channel; the zero padding is a Select of a Load
    whose index is out of range exactly when the condition is false."""
    X, Wt, O = Buffer("X", (H, W)), Buffer("Wt", (3, 3)), Buffer("O", (H, W))
    h, w = Var("h"), Var("w")
    zero = loops([(h, H, S), (w, W, S)], Store(O, (h, w), Const(0.0)))
    h2, kh, kw = Var("h"), Var("kh"), Var("kw")
    wo2, v2 = Var("wo"), Var("v")
    w2 = wo2 * lanes + v2 if lanes else Var("w")
    y, x = h2 + kh - 1, w2 + kw - 1
    inside = And(And(cmp(">=", y, 0), cmp("<", y, H)), And(cmp(">=", x, 0), cmp("<", x, W)))
    term = Select(inside, X[y, x], Const(0.0)) * Wt[kh, kw]
    wloops = [(wo2, W // lanes, S), (v2, lanes, V)] if lanes else [(w2, W, S)]
    acc = loops([(h2, H, S), (kh, 3, S), (kw, 3, U), *wloops],
                Store(O, (h2, w2), O[h2, w2] + term))
    return PrimFunc("conv", (X, Wt, O), Seq([zero, acc]))


def conv_ref(x: np.ndarray, wt: np.ndarray) -> np.ndarray:
    H, W = x.shape
    xp = np.pad(x.astype(np.float64), 1)
    return sum(xp[kh:kh + H, kw:kw + W] * wt[kh, kw] for kh in range(3) for kw in range(3))


@pytest.mark.parametrize("lanes", [0, 16, 8])
def test_padded_select_of_load(target, lanes):
    H, W = 7, 32
    x, wt = rand(H, W), rand(3, 3)
    k, o = run(padded_conv(H, W, lanes), target, x, wt)
    assert_close(o, conv_ref(x, wt))
    if lanes:
        assert f"llvm.masked.load.v{lanes}f32" in k.source  # x+kw-1 may leave the row


def test_strided_gather_and_scatter(target):
    X, G, T = Buffer("X", (6, 64)), Buffer("G", (6, 32)), Buffer("T", (6, 64))
    i, v, i2, v2, i3, v3 = (Var(n) for n in "iviviv")
    f = PrimFunc("strided", (X, T), Seq([
        loops([(i, 6, S), (v, 32, V)], Store(G, (i, v), X[i, v * 2])),          # gather
        loops([(i2, 6, S), (v2, 32, V)], Store(T, (i2, v2 * 2), G[i2, v2])),    # scatter
        loops([(i3, 6, S), (v3, 32, V)], Store(T, (i3, v3 * 2 + 1), X[i3, (v3 * 3) % 32]
                                              + X[i3, v3 // 2])),
    ]), workspaces=(G,))
    x = rand(6, 64)
    k, t = run(f, target, x)
    ref = np.empty_like(x)
    ref[:, 0::2] = x[:, 0::2]
    lanes = np.arange(32)
    ref[:, 1::2] = x[:, (lanes * 3) % 32] + x[:, lanes // 2]
    assert_close(t, ref)
    assert "insertelement <32 x float>" in k.source


@pytest.mark.parametrize("N", [100, 112])
def test_lane_dependent_guard_becomes_mask(target, N):
    """A tail guard on the lane var: masked store and loads, the else arm under the
    inverted mask; a guard the loop bounds decide (N = 112) costs nothing."""
    X, Y = Buffer("X", (3, N)), Buffer("Y", (3, 112))
    i, jo, v = Var("i"), Var("jo"), Var("v")
    col = jo * 16 + v
    f = PrimFunc("tail", (X, Y), loops([(i, 3, S), (jo, 7, S), (v, 16, V)], IfThenElse(
        cmp("<", col, N), Store(Y, (i, col), X[i, col] * 2.0), Store(Y, (i, col), Const(-1.0)))))
    x = rand(3, N)
    k, y = run(f, target, x)
    ref = np.full((3, 112), -1.0)
    ref[:, :N] = x * 2
    assert_close(y, ref)
    masked = "llvm.masked.store.v16f32" in k.source and "llvm.masked.load.v16f32" in k.source
    assert masked == (N < 112)
    assert "store <16 x float>" in k.source or N < 112


def test_reduction_store_in_vectorized_loop_falls_back(target):
    X, R = Buffer("X", (5, 48)), Buffer("R", (5,))
    i, v, i0 = Var("i"), Var("v"), Var("i")
    f = PrimFunc("rowsum", (X, R), Seq([
        For(i0, 5, S, Store(R, (i0,), Const(0.0))),
        loops([(i, 5, S), (v, 48, V)], Store(R, (i,), R[i] + X[i, v]))]))
    x = rand(5, 48)
    k, r = run(f, target, x)
    assert_close(r, x.astype(np.float64).sum(axis=1))
    assert "x float>" not in k.source  # emitted as a scalar loop


@pytest.mark.parametrize("case", ["cross_lane_read", "nested_loop", "allocate", "wide"])
def test_unvectorizable_loops_stay_correct(target, case):
    X, Y = Buffer("X", (130,)), Buffer("Y", (130,))
    v, t = Var("v"), Var("t")
    tmp = Buffer("tmp", (1,), scope=Scope.LOCAL)
    body = {
        # lane v reads what lane v-1 wrote: a true loop-carried dependence
        "cross_lane_read": Store(Y, (v + 1,), Y[v] + X[v]),
        "nested_loop": For(t, 2, S, Store(Y, (v,), Y[v] + X[v])),
        "allocate": Allocate(tmp, Seq([Store(tmp, (0,), X[v] * 3.0),
                                       Store(Y, (v,), tmp[0])])),
        "wide": Store(Y, (v,), X[v] * 3.0),
    }[case]
    n = 128 if case == "wide" else 16
    z = Var("z")
    zero = For(z, 130, S, Store(Y, (z,), Const(0.0)))
    f = PrimFunc("fallback", (X, Y), Seq([zero, For(v, n, V, body)]))
    x = rand(130)
    _, y = run(f, target, x)
    ref = np.zeros(130)
    if case == "cross_lane_read":
        for i in range(16):
            ref[i + 1] = ref[i] + x[i]
    elif case == "nested_loop":
        ref[:16] = 2 * x[:16].astype(np.float64)
    elif case == "allocate":
        ref[:16] = 3 * x[:16].astype(np.float64)
    else:
        ref[:128] = 3 * x[:128].astype(np.float64)
    assert_close(y, ref)


# -- parallel ------------------------------------------------------------------------
def test_parallel_nested_in_parallel_runs_serial_inside(target):
    M, N = 9, 40
    X, Y = Buffer("X", (M, N)), Buffer("Y", (M, N))
    i, j = Var("i"), Var("j")
    f = PrimFunc("nested", (X, Y), loops([(i, M, P), (j, N, P)],
                                         Store(Y, (i, j), X[i, j] * X[i, j] + 1.0)))
    x = rand(M, N)
    k, y = run(f, target, x)
    assert_close(y, x.astype(np.float64) ** 2 + 1)
    assert k.source.count("call void @GOMP_parallel") == 1


def test_parallel_loop_captures_outer_vars_and_local_buffers(target):
    """A parallel loop inside a serial loop and an Allocate: the outer var and the local
    buffer's pointer travel to the outlined function."""
    X, Y = Buffer("X", (4, 30)), Buffer("Y", (4, 30))
    sc = Buffer("scale", (1,), scope=Scope.LOCAL)
    o, j = Var("o"), Var("j")
    f = PrimFunc("capture", (X, Y), For(o, 4, S, Allocate(sc, Seq([
        Store(sc, (0,), Const(0.5)),
        For(j, 30, P, Store(Y, (o, j), X[o, j] * sc[0] + o * 0 + 0.0)),
    ]))))
    x = rand(4, 30)
    _, y = run(f, target, x)
    assert_close(y, x * 0.5)


def test_workspace_written_then_read(target):
    """B is packed transposed into a workspace, then C = A @ packed^T; the kernel is called
    twice so the workspace is reused."""
    M, N, K = 6, 20, 12
    A, B, C = Buffer("A", (M, K)), Buffer("B", (K, N)), Buffer("C", (M, N))
    Bt = Buffer("Bt", (N, K))
    j, k, i, j2, k2 = Var("j"), Var("k"), Var("i"), Var("j"), Var("k")
    pack = loops([(j, N, P), (k, K, S)], Store(Bt, (j, k), B[k, j]))
    i3, j3 = Var("i"), Var("j")
    mm = Seq([loops([(i, M, S), (j2, N, S)], Store(C, (i, j2), Const(0.0))),
              loops([(i3, M, S), (j3, N, S), (k2, K, S)],
                    Store(C, (i3, j3), C[i3, j3] + A[i3, k2] * Bt[j3, k2]))])
    f = PrimFunc("packed", (A, B, C), Seq([pack, Sync(), mm]), workspaces=(Bt,))
    kern = compile_llvm(f, target)
    assert kern.workspaces[0].ctypes.data % 64 == 0
    for seed in (1, 2):
        a, b = rand(M, K, seed=seed), rand(K, N, seed=seed)
        c = np.zeros((M, N), np.float32)
        kern(a, b, c)
        assert_close(c, a.astype(np.float64) @ b)


# -- scalar semantics ------------------------------------------------------------------
def test_floor_division_modulo_min_max(target):
    """Index math with negative operands uses floor semantics, like Python."""
    X, Y = Buffer("X", (16,)), Buffer("Y", (40,))
    i = Var("i")
    idx = minimum(maximum(((i - 21) // 4) % 16 + (i - 17) % 5, 0), 15)
    val = maximum(X[idx], 0.0) + minimum(X[(i * 7) % 16], Const(0.25))
    f = PrimFunc("idx", (X, Y), For(i, 40, S, IfThenElse(
        cmp("!=", i % 3, 0), Store(Y, (i,), val), Store(Y, (i,), Const(9.0)))))
    x = rand(16)
    _, y = run(f, target, x)
    ref = np.empty(40)
    for n in range(40):
        m = min(max(((n - 21) // 4) % 16 + (n - 17) % 5, 0), 15)
        ref[n] = max(x[m], 0) + min(x[(n * 7) % 16], 0.25) if n % 3 else 9.0
    assert_close(y, ref)


def test_thread_binding_loops_are_rejected(target):
    X = Buffer("X", (4,))
    t = Var("t")
    f = PrimFunc("gpu", (X,), For(t, 4, ForKind.THREAD_X, Store(X, (t,), Const(1.0))))
    with pytest.raises(ValueError, match="not supported on llvm target"):
        generate_llvm_ir(f, target)


def test_unbound_variable_is_reported(target):
    X = Buffer("X", (4,))
    f = PrimFunc("bad", (X,), Store(X, (Var("q"),), Const(1.0)))
    with pytest.raises(ValueError, match="'q'"):
        generate_llvm_ir(f, target)


# -- speed (printed, never asserted) -----------------------------------------------------
def test_matmul_512_speed(target):
    M = N = K = 512
    t0 = time.perf_counter()
    kern = compile_llvm(tiled_matmul(M, N, K, par=True), target)
    build = time.perf_counter() - t0
    a, b = aligned_empty((M, K)), aligned_empty((K, N))
    a[...], b[...] = rand(M, K), rand(K, N)
    c = aligned_empty((M, N))
    call = kern.bind(a, b, c)
    call()
    assert_close(c, a.astype(np.float64) @ b)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(10):
            call()
        best = min(best, (time.perf_counter() - t0) / 10)
    print(f"\nmatmul 512^3 (4x32 tile, 16 lanes, parallel rows): compile {build * 1e3:.0f} ms, "
          f"{best * 1e3:.2f} ms/call, {2 * M * N * K / best / 1e9:.1f} GFLOP/s")


# -- edge cases ------------------------------------------------------------------------
def test_edge_loops_long_unroll_one_lane_and_single_iteration_parallel(target):
    X, Y = Buffer("X", (600,)), Buffer("Y", (600,))
    a, b, c, d = Var("a"), Var("b"), Var("c"), Var("d")
    f = PrimFunc("edges", (X, Y), Seq([
        For(a, 600, U, Store(Y, (a,), X[a] + 1.0)),             # too long to unroll
        For(b, 1, V, Store(Y, (b,), X[b] * 5.0)),                # one lane
        For(c, 1, P, For(d, 4, V, Store(Y, (c * 4 + d + 1,),     # one iteration: no team
                                        X[c * 4 + d + 1] - 1.0))),
    ]))
    x = rand(600)
    k, y = run(f, target, x)
    ref = x.astype(np.float64) + 1
    ref[0], ref[1:5] = 5 * x[0], x[1:5] - 1.0
    assert_close(y, ref)
    assert "GOMP_parallel" not in k.source


def test_lane_independent_select_with_vector_arm_and_reordered_index(target):
    """A scalar condition choosing between vector arms; an update whose load index is the
    store's written differently (v + 8*jo vs jo*8 + v) still vectorizes."""
    X, Y = Buffer("X", (6, 16)), Buffer("Y", (6, 16))
    i, jo, v, i0, j0 = Var("i"), Var("jo"), Var("v"), Var("i"), Var("j")
    zero = loops([(i0, 6, S), (j0, 16, S)], Store(Y, (i0, j0), Const(1.0)))
    pick = Select(cmp("<", i, 3), X[i, jo * 8 + v], X[i, 15 - (jo * 8 + v)])
    upd = Store(Y, (i, jo * 8 + v), Y[i, v + 8 * jo] + pick)
    f = PrimFunc("sel", (X, Y), Seq([zero, loops([(i, 6, S), (jo, 2, S), (v, 8, V)], upd)]))
    x = rand(6, 16)
    k, y = run(f, target, x)
    ref = 1.0 + np.where(np.arange(6)[:, None] < 3, x, x[:, ::-1])
    assert_close(y, ref)
    assert "store <8 x float>" in k.source


def test_global_allocate_and_non_float_buffers_are_rejected(target):
    X, G = Buffer("X", (4,)), Buffer("G", (4,))
    i = Var("i")
    f = PrimFunc("g", (X,), Allocate(G, For(i, 4, S, Store(X, (i,), G[i]))))
    with pytest.raises(ValueError, match="workspace"):
        generate_llvm_ir(f, target)
    Xi = Buffer("Xi", (4,), dtype="int64")
    with pytest.raises(ValueError, match="float32"):
        generate_llvm_ir(PrimFunc("i", (Xi,), For(i, 4, S, Store(Xi, (i,), Const(1)))), target)


def test_real_target_object_is_accepted():
    target_mod = pytest.importorskip("autotune.target")
    t = target_mod.Target("llvm")
    f = matmul(8, 32, 8, lanes=16, par_i=True)
    a, b = rand(8, 8), rand(8, 32)
    k, c = run(f, t, a, b)
    assert_close(c, a.astype(np.float64) @ b)
    assert k.target is t


def test_names_llvm_reserves_are_renamed(target):
    A, B = Buffer("entry", (16,)), Buffer("5", (16,))
    i = Var("0")
    f = PrimFunc("3-odd name", (A, B), For(i, 16, V, Store(B, (i,), A[i] + 1.0)))
    a = rand(16)
    _, b = run(f, target, a)
    assert_close(b, a + 1.0)
