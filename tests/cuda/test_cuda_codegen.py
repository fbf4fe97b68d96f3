"""CUDA C generation from hand-built loop ASTs: launch dims, guards for narrow thread
loops, barriers kept out of divergent code, floor division, buffers, ptxas parsing."""
from __future__ import annotations

import pytest

import autotune
from autotune.codegen.cuda.compiler import (
    CudaBinary,
    CudaCodegenError,
    compile_cuda_batch,
    generate_cuda,
    launch_reason,
    resource_reason,
)
from autotune.codegen.cuda.nvcc import Resources, parse_ptxas
from autotune.codegen.cuda.passes import Launch, launch_of, prepare
from autotune.ir.expr import Const, Var, cmp, floordiv, mod
from autotune.ir.stmt import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Scope,
    Seq,
    Stmt,
    Store,
    Sync,
    walk_stmts,
)
from tests.cuda.cuda_cases import FAST_NVCC, target

BX, TX, TY = ForKind.BLOCK_X, ForKind.THREAD_X, ForKind.THREAD_Y


def copy_kernel(inner_extent: int = 32) -> PrimFunc:
    """out[b*64 + t] = a[...] with a shared staging tile and a narrower second thread loop."""
    a, out = Buffer("a", (256,)), Buffer("out", (256,))
    sh = Buffer("tile", (64,), scope=Scope.SHARED)
    b, t, t2 = Var("b"), Var("t"), Var("t2")
    fill = For(t, 64, TX, Store(sh, (t,), a[b * 64 + t]))
    use = For(t2, inner_extent, TX, Store(out, (b * 64 + t2,), sh[63 - t2]))
    body = For(b, 4, BX, Allocate(sh, Seq([fill, Sync(), use])))
    return PrimFunc("copy", (a, out), body)


def syncs_under_divergent_if(stmt) -> int:
    n = 0
    for s in walk_stmts(stmt):
        if isinstance(s, IfThenElse):
            n += sum(isinstance(x, Sync) for x in walk_stmts(s.then))
    return n


def test_launch_dims_are_the_largest_extent_per_tag():
    f = copy_kernel(inner_extent=32)
    assert launch_of(f) == Launch((4, 1, 1), (64, 1, 1), 256)
    src, launch = generate_cuda(f, target())
    assert "__launch_bounds__(64)" in src
    assert "__shared__ __align__(16) float tile[64];" in src
    assert "const int b = blockIdx.x;" in src
    assert "if (t2 < 32) {" in src  # the narrower loop is guarded, not looped
    assert 'extern "C" __global__' in src and "const float* __restrict__ a" in src
    assert "float* __restrict__ out" in src and "const float* __restrict__ out" not in src


def test_barrier_under_thread_guard_is_hoisted():
    a, out = Buffer("a", (64,)), Buffer("out", (64,))
    sh = Buffer("s", (64,), scope=Scope.SHARED)
    t = Var("t")
    guarded = IfThenElse(cmp("<", t, 40), Seq([Store(sh, (t,), a[t]), Sync(),
                                                Store(out, (t,), sh[63 - t])]))
    f = PrimFunc("k", (a, out), For(t, 64, TX, Allocate(sh, guarded)))
    body = prepare(f, launch_of(f))
    assert syncs_under_divergent_if(body) == 0
    assert sum(isinstance(s, Sync) for s in walk_stmts(body)) == 1
    assert sum(isinstance(s, IfThenElse) for s in walk_stmts(body)) == 2


def test_barrier_in_a_narrow_thread_loop_is_reached_by_all_threads():
    a, out = Buffer("a", (64,)), Buffer("out", (64,))
    sh = Buffer("s", (64,), scope=Scope.SHARED)
    t, t2 = Var("t"), Var("t2")
    wide = For(t, 64, TX, Store(out, (t,), a[t]))
    narrow = For(t2, 16, TX, Seq([Store(sh, (t2,), a[t2]), Sync(), Store(out, (t2,), sh[t2])]))
    f = PrimFunc("k", (a, out), Seq([wide, Allocate(sh, narrow)]))
    src, _ = generate_cuda(f, target())
    body = prepare(f, launch_of(f))
    assert syncs_under_divergent_if(body) == 0
    assert src.count("if (t2 < 16)") == 2


def test_block_uniform_guard_may_hold_a_barrier():
    a, out = Buffer("a", (64,)), Buffer("out", (64,))
    sh = Buffer("s", (32,), scope=Scope.SHARED)
    b, t = Var("b"), Var("t")
    inner = Allocate(sh, Seq([Store(sh, (t,), a[t]), Sync(), Store(out, (t,), sh[31 - t])]))
    f = PrimFunc("k", (a, out), For(b, 3, BX, For(t, 32, TX, IfThenElse(cmp("<", b, 2), inner))))
    body = prepare(f, launch_of(f))
    assert syncs_under_divergent_if(body) == 1  # b is the same for the whole block


def test_guards_proven_by_ranges_are_dropped_and_repeats_merged():
    a, out = Buffer("a", (64,)), Buffer("out", (64,))
    t = Var("t")
    c = cmp("<", t, 40)
    always = cmp(">=", mod(t, 8) + 3, 0)
    f = PrimFunc("k", (a, out), For(t, 64, TX, IfThenElse(always, IfThenElse(
        c, IfThenElse(c, Store(out, (t,), a[t]))))))
    body = prepare(f, launch_of(f))
    conds = [s.cond for s in walk_stmts(body) if isinstance(s, IfThenElse)]
    assert conds == [c]


def test_floor_division_of_possibly_negative_values():
    a, out = Buffer("a", (64,)), Buffer("out", (64,))
    t = Var("t")
    idx = floordiv(t - 5, 4) + 2  # t - 5 may be negative: C's / would round toward zero
    f = PrimFunc("k", (a, out), For(t, 32, TX, Store(out, (t,), a[idx + mod(t, 4)])))
    src, _ = generate_cuda(f, target())
    assert "at_floordiv<int>(t - 5, 4)" in src
    assert "t % 4" in src  # t >= 0: plain C modulo


def test_loops_buffers_and_epilogue_ops():
    a, out = Buffer("a", (8, 8)), Buffer("out", (8, 8))
    ws = Buffer("ws", (8,))
    acc = Buffer("acc", (4,), scope=Scope.LOCAL)
    i, j, v, u = Var("i"), Var("j.o"), Var("v"), Var("one")
    from autotune.ir.expr import maximum
    body = For(i, 8, TY, Allocate(acc, Seq([
        For(v, 2, ForKind.VTHREAD, For(j, 2, ForKind.UNROLLED, For(u, 1, ForKind.SERIAL,
            Store(acc, (v * 2 + j,), a[i, v * 4 + j * 2 + u])))),
        For(v, 2, ForKind.VECTORIZED, Store(ws, (v,), acc[v])),
        Store(out, (i, Const(0)), maximum(acc[0] + ws[1], Const(0.0))),
    ])))
    f = PrimFunc("k", (a, out), body, workspaces=(ws,))
    src, _ = generate_cuda(f, target())
    assert src.count("#pragma unroll") == 2  # the vthread and the unrolled loop
    assert "float acc[4];" in src
    assert "for (int j_o = 0; j_o < 2; ++j_o)" in src  # names made C identifiers
    assert "one" not in src  # a one-trip loop leaves no variable behind
    assert "fmaxf(acc[0] + ws[1], 0.0f)" in src
    assert "float* __restrict__ ws)" in src  # workspaces follow the arguments


def test_hand_built_kernels_compile(nvcc):
    f1, f2 = copy_kernel(32), copy_kernel(64)
    out = compile_cuda_batch([f1, f2], target(), FAST_NVCC)
    assert all(isinstance(o, CudaBinary) for o in out), out
    assert out[0].resources.barriers == 1


def test_launch_limits_are_enforced_at_codegen():
    a, out = Buffer("a", (4096,)), Buffer("out", (4096,))
    t = Var("t")
    f = PrimFunc("k", (a, out), For(t, 2048, TX, Store(out, (t,), a[t])))
    with pytest.raises(CudaCodegenError, match="2048 threads per block"):
        generate_cuda(f, target())
    lim = target().cuda
    assert "shared memory" in launch_reason(Launch((1, 1, 1), (32, 1, 1), 64 * 1024), lim)
    assert "block dim z" in launch_reason(Launch((1, 1, 1), (1, 1, 128), 0), lim)


def big_tile_kernel(floats: int, fill_all: bool = True) -> PrimFunc:
    """One block reverses ``a`` through a float tile of ``floats`` (+1 from a half tile of 8
    elements); without ``fill_all`` the last element of the tile is never written."""
    a, out = Buffer("a", (floats,)), Buffer("out", (floats,))
    sh = Buffer("tile", (floats,), scope=Scope.SHARED)
    small = Buffer("flag", (8,), "float16", Scope.SHARED)
    t, i = Var("t"), Var("i")
    fill: Stmt = Store(sh, (i * 256 + t,), a[i * 256 + t])
    if not fill_all:
        fill = IfThenElse(cmp("<", i * 256 + t, floats - 1), fill)
    fill = For(i, floats // 256, ForKind.SERIAL, fill)
    use = For(i, floats // 256, ForKind.SERIAL,
              Store(out, (i * 256 + t,), sh[floats - 1 - i * 256 - t] + small[t % 8]))
    init = IfThenElse(cmp("<", t, 8), Store(small, (t,), Const(1.0)))
    body = For(t, 256, TX, Allocate(sh, Allocate(small, Seq([fill, init, Sync(), use]))))
    return PrimFunc("big", (a, out), body)


def test_shared_memory_past_48kb_is_one_dynamic_block():
    """13 KB of tiles stay static arrays; 64 KB become pointers into the dynamic block, each
    at a 128-byte aligned offset, and the launch carries its size instead."""
    small = launch_of(big_tile_kernel(3328))
    assert (small.shared_bytes, small.dynamic_shared_bytes) == (3328 * 4 + 16, 0)
    f = big_tile_kernel(16384)
    assert launch_of(f) == Launch((1, 1, 1), (256, 1, 1), 0, 16384 * 4 + 128)
    assert launch_of(f, static_limit=100_000).dynamic_shared_bytes == 0
    src, launch = generate_cuda(f, target())
    assert launch.dynamic_shared_bytes == 65664
    assert "extern __shared__ __align__(128) unsigned char at_shared[];" in src
    assert "float* const tile = reinterpret_cast<float*>(at_shared + 0);" in src
    assert "__half* const flag = reinterpret_cast<__half*>(at_shared + 65536);" in src
    assert "__shared__ __align__" not in src.replace("extern __shared__ __align__", "")


@pytest.mark.parametrize("arch, fits", [("sm_80", 166912), ("sm_86", 101376),
                                         ("sm_89", 101376), ("sm_90", 232448)])
def test_dynamic_shared_memory_is_checked_against_the_opt_in_limit(arch, fits):
    lim = autotune.Target(f"cuda -arch={arch}").cuda
    static = Launch((1, 1, 1), (32, 1, 1), 49152 + 16)
    assert "static shared memory > limit 49152" in launch_reason(static, lim)
    assert launch_reason(Launch((1, 1, 1), (32, 1, 1), 0, fits), lim) is None
    over = launch_reason(Launch((1, 1, 1), (32, 1, 1), 0, fits + 128), lim)
    assert over == f"{fits + 128} bytes of shared memory > opt-in limit {fits} of {arch}"
    res = Resources(registers=32)
    assert resource_reason(res, Launch((1, 1, 1), (32, 1, 1), 0, fits), lim) is None
    assert "opt-in limit" in resource_reason(res, Launch((1, 1, 1), (32, 1, 1), 0, fits + 1),
                                             lim)


def test_big_tile_kernel_compiles_and_runs_in_the_execution_model(nvcc):
    import numpy as np

    from autotune.codegen.cuda.compiler import prepare_kernel
    from autotune.codegen.cuda.simulate import CudaExecutionError, run_kernel
    f = big_tile_kernel(16384)
    r = compile_cuda_batch([f], target(), FAST_NVCC)[0]
    assert isinstance(r, CudaBinary), r
    assert r.resources.shared_bytes == 0 and r.launch.dynamic_shared_bytes == 65664
    body, launch = prepare_kernel(f, target())
    a = np.arange(16384, dtype=np.float32)
    out = np.zeros(16384, np.float32)
    run_kernel(f, body, launch, [a, out])
    np.testing.assert_array_equal(out, a[::-1] + 1.0)
    # dynamic shared memory starts as poison, as static arrays do
    holed = big_tile_kernel(16384, fill_all=False)
    body, launch = prepare_kernel(holed, target())
    with pytest.raises(CudaExecutionError) as err:
        run_kernel(holed, body, launch, [a, np.zeros_like(out)])
    assert err.value.kind == "uninitialized" and launch.dynamic_shared_bytes == 65664


def test_register_pressure_is_checked_after_compiling():
    lim = target().cuda
    ok = Resources(registers=64, shared_bytes=1024)
    assert resource_reason(ok, Launch((1, 1, 1), (1024, 1, 1), 1024), lim) is None
    heavy = Resources(registers=128)
    assert "registers" in resource_reason(heavy, Launch((1, 1, 1), (1024, 1, 1), 0), lim)


def test_parse_ptxas_report():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_0' for 'sm_90'
ptxas info    : Function properties for k_0
    8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'k_1' for 'sm_90'
ptxas info    : Function properties for k_1
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers
"""
    res = parse_ptxas(log)
    assert res["k_0"] == Resources(registers=40, shared_bytes=2048, stack_bytes=8,
                                   spill_stores=4, spill_loads=12, barriers=1)
    assert res["k_1"] == Resources(registers=10)


def test_stages_that_need_a_grid_barrier_are_refused():
    a, tmp, out = Buffer("a", (64,)), Buffer("tmp", (64,)), Buffer("out", (64,))
    b, t, u = Var("b"), Var("t"), Var("u")
    first = For(b, 2, BX, For(t, 32, TX, Store(tmp, (b * 32 + t,), a[b * 32 + t])))
    second = For(u, 64, TX, Store(out, (u,), tmp[63 - u]))
    f = PrimFunc("k", (a, out), Seq([first, second]), workspaces=(tmp,))
    with pytest.raises(CudaCodegenError, match="grid-wide barrier"):
        generate_cuda(f, target())
    unbound = PrimFunc("k", (a, out), Seq([first, For(u, 64, ForKind.SERIAL,
                                                     Store(out, (u,), a[u]))]))
    with pytest.raises(CudaCodegenError, match="every thread"):
        generate_cuda(unbound, target())


def test_barriers_with_no_shared_access_after_them_are_dropped():
    a, out = Buffer("a", (64,)), Buffer("out", (64,))
    sh = Buffer("s", (64,), scope=Scope.SHARED)
    t, k = Var("t"), Var("k")
    use = Store(out, (t,), sh[63 - t])
    in_loop = For(k, 4, ForKind.SERIAL, Allocate(sh, Seq([
        Store(sh, (t,), a[t] + k), Sync(), use, Sync()])))
    once = Allocate(sh, Seq([Store(sh, (t,), a[t]), Sync(), use, Sync(), Sync()]))
    looped = prepare(f1 := PrimFunc("k", (a, out), For(t, 64, TX, in_loop)), launch_of(f1))
    single = prepare(f2 := PrimFunc("k", (a, out), For(t, 64, TX, once)), launch_of(f2))
    assert sum(isinstance(s, Sync) for s in walk_stmts(looped)) == 2  # the next trip refills
    assert sum(isinstance(s, Sync) for s in walk_stmts(single)) == 1
