"""Lowering checks that need no code generator: the loop AST is run by the interpreter."""
import pickle

import numpy as np
import pytest

import autotune
from autotune import driver
from autotune.ir.expr import Var, walk
from autotune.ir.interp import interpret
from autotune.ir.stmt import Allocate, For, ForKind, Scope, Store, Sync, format_func, walk_stmts
from autotune.schedule.compute import compute, placeholder, reduce_axis
from autotune.schedule.schedule import Schedule

CASES = [
    ("matmul", dict(M=13, N=37, K=11), ("bias", "relu")),
    ("batch_matmul", dict(B=2, M=9, N=17, K=5), ("scale_shift",)),
    ("conv2d", dict(N=1, C=3, H=7, W=9, K=5, R=3, S=3, stride=(2, 1), pad=(1, 0)), ("bias",)),
    ("conv2d", dict(N=2, C=4, H=6, W=6, K=3, R=1, S=1, stride=1, pad=0), ()),
    ("depthwise_conv2d", dict(N=1, C=3, H=7, W=9, R=3, S=3, stride=2, pad=1, multiplier=2),
     ("scale_shift", "relu")),
]


@pytest.mark.parametrize("op,params,epi", CASES)
def test_sampled_configs_interpret_correctly(op, params, epi):
    wl = autotune.workload(op, epilogue=epi, **params)
    target = autotune.Target("llvm")
    sp = driver.config_space(wl, target)
    args = wl.random_args(1)
    ref = wl.reference(args)
    rng = np.random.default_rng(0)
    cfgs = [sp.default()] + [c for c in sp.sample(rng, 40) if sp.is_valid(c)][:12]
    for cfg in cfgs:
        func = driver.lower(wl, target, cfg)
        out = [a.copy() for a in args]
        interpret(func, out)
        np.testing.assert_allclose(out[-1], ref, rtol=1e-4, atol=1e-4, err_msg=str(dict(cfg)))


def test_lowered_ast_prints_readably():
    wl = autotune.workload("matmul", M=64, N=64, K=64, epilogue=["relu"])
    text = str(autotune.lower(wl, "llvm"))
    assert text.startswith(
        "def at_matmul(A: float32[64, 64], B: float32[64, 64], C: float32[64, 64]):")
    assert "# parallel" in text and "# vectorized" in text and "@local" in text
    assert "max(" in text  # the fused relu


def test_gpu_style_schedule_lowers_to_bound_loops_with_shared_tiles():
    M = N = K = 32
    A, B = placeholder("A", (M, K)), placeholder("B", (K, N))
    k = reduce_axis(K, "k")
    C = compute("C", (M, N), lambda i, j: A[i, k.var] * B[k.var, j], [k], axis_names=["i", "j"])
    s = Schedule(C, [A, B])
    CL = s.cache_write(C, "local")
    AS = s.cache_read(A, "shared", [CL])
    st = s[C]
    i, j = st.axis
    bi, vi, ti, ii = st.tile(i, (2, 2, 4, 2))
    bj, tj, ij = st.tile(j, (2, 8, 2))
    st.reorder(bi, bj, ti, tj, vi, ii, ij)
    st.bind(bi, "blockIdx.y")
    st.bind(bj, "blockIdx.x")
    st.bind(ti, "threadIdx.y")
    st.bind(tj, "threadIdx.x")
    st.bind(vi, "vthread")
    CL.compute_at(st, tj)
    ko, ki = CL.split(CL.reduce_axis[0], factor=8)
    CL.reorder(ko, ki, *CL.axis)
    AS.compute_at(CL, ko)
    fused = AS.fuse(*AS.axis)
    _, tx = AS.split(fused, factor=8)
    AS.bind(tx, "threadIdx.x")
    func = autotune.schedule.lower.lower_schedule(s, "gpu_mm")
    stmts = list(walk_stmts(func.body))
    kinds = [x.kind for x in stmts if isinstance(x, For)]
    for kind in (ForKind.BLOCK_X, ForKind.BLOCK_Y, ForKind.THREAD_X, ForKind.THREAD_Y,
                 ForKind.VTHREAD):
        assert kind in kinds
    allocs = {x.buffer.name: x.buffer for x in stmts if isinstance(x, Allocate)}
    # the register tile holds both vthreads' rows densely: 2 x 2 x 2 floats
    assert allocs["C_local"].scope is Scope.LOCAL and allocs["C_local"].size == 8
    # the shared tile covers the block's 16 rows of A (threads and vthreads relaxed) x 8 of k
    assert allocs["A_shared"].scope is Scope.SHARED and allocs["A_shared"].shape == (16, 8)
    assert any(isinstance(x, Sync) for x in stmts)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    out = np.full((M, N), np.nan)
    interpret(func, [a, b, out])
    np.testing.assert_allclose(out, a @ b, rtol=1e-9)


def test_invalid_config_is_an_instantiation_error():
    wl = autotune.workload("conv2d", N=1, C=8, H=8, W=64, K=64, R=3, S=3, stride=1, pad=1)
    target = autotune.Target("llvm")
    sp = driver.config_space(wl, target)
    widest = {n: max(sp.knob(n).candidates, key=lambda c: c[2])
              for n in ("tile_k", "tile_y", "tile_x")}
    big = sp.config({**sp.default(), **widest})
    assert not sp.is_valid(big)
    with pytest.raises(driver.InvalidConfig, match="register tile"):
        driver.lower(wl, target, big)


def test_a_lowered_function_survives_pickling():
    """Build workers send kernels' ASTs to the parent: the copy prints the same, its index
    vars are its own loops' vars (identity kept), and structurally equal expressions hash
    equal again (expression hashes are cached at construction)."""
    wl = autotune.workload("conv2d", N=1, C=16, H=9, W=9, K=16, R=3, S=3, stride=1, pad=1)
    func = autotune.lower(wl, "llvm")
    copy = pickle.loads(pickle.dumps(func))
    assert format_func(copy) == format_func(func)
    loop_vars = {id(s.var) for s in walk_stmts(copy.body) if isinstance(s, For)}
    index_vars = [e for s in walk_stmts(copy.body) if isinstance(s, Store)
                  for i in s.indices for e in walk(i) if isinstance(e, Var)]
    assert index_vars and all(id(v) in loop_vars for v in index_vars)
    v = Var("i")
    w, e = pickle.loads(pickle.dumps((v, v * 4 + 1)))
    assert e == w * 4 + 1 and hash(e) == hash(w * 4 + 1) and e != v * 4 + 1


@pytest.mark.parametrize("kind", ["llvm", "cuda"])
def test_configs_share_the_compute_graph_without_changing_it(kind):
    """Every config of a workload schedules one cached graph: lowering others in between
    (cache_write, cache_read, packing, inlining) leaves a config's AST as it was."""
    from autotune.schedule.definitions import conv2d_graph

    wl = autotune.workload("conv2d", N=1, C=8, H=10, W=10, K=16, R=3, S=3, stride=1, pad=1,
                           epilogue=("bias", "relu"))
    target = autotune.Target(kind)
    graph = conv2d_graph(wl)
    ops = {t.name: (t.op, t.op.body) for t in [*graph.temps, graph.output]}
    configs = [c for c in driver.config_space(wl, target).sample(np.random.default_rng(5), 40)
               if driver.config_space(wl, target).is_valid(c)][:12]
    first = {}
    for c in configs:
        try:
            first[c.index] = format_func(driver.lower(wl, target, c))
        except driver.InvalidConfig:
            pass
    assert len(first) >= 4
    for c in reversed(configs):  # again, after every other config
        if c.index in first:
            assert format_func(driver.lower(wl, target, c)) == first[c.index]
    assert conv2d_graph(wl) is graph
    assert {t.name: (t.op, t.op.body) for t in [*graph.temps, graph.output]} == ops
