"""nvcc compiles sampled tensor-core configs (float16 and bfloat16; matmul, batch_matmul,
conv2d; odd shapes; epilogues) for sm_80 and sm_90, and the CUDA C they become is typed by
each buffer's dtype, with wmma and cp.async where the loop AST has them."""
from __future__ import annotations

import re

import numpy as np
import pytest

import autotune
from autotune import driver
from autotune.codegen.cuda.compiler import CudaBinary, compile_cuda_batch, generate_cuda
from autotune.codegen.cuda.passes import CudaCodegenError, Launch, prepare
from autotune.ir.expr import Const, Var, cmp
from autotune.ir.stmt import (
    Allocate,
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
    Sync,
)
from autotune.schedule.templates import cuda_tensorcore as tc
from tests.cuda.cuda_cases import FAST_NVCC
from tests.cuda.tensorcore_cases import (
    ARCHS,
    DTYPES,
    OPS,
    sample_dynamic,
    sample_valid,
    target,
    workloads,
)

PER_WORKLOAD = 3  # sampled configs per (workload, arch), besides the default


@pytest.mark.parametrize("arch", ARCHS)
def test_sampled_configs_compile(arch, nvcc):
    funcs, labels = [], []
    for i, (op, dt) in enumerate((op, dt) for op in OPS for dt in DTYPES):
        for wl in workloads(op, dt):
            sp = driver.config_space(wl, target(arch))
            for cfg in [sp.default(), *sample_valid(wl, PER_WORKLOAD, seed=11 + i, arch=arch)]:
                funcs.append(driver.lower(wl, target(arch), cfg))
                labels.append(f"{wl} {dict(cfg)}")
    assert len(funcs) >= 2 * len(OPS) * 2 * (1 + PER_WORKLOAD)
    results = compile_cuda_batch(funcs, target(arch), FAST_NVCC)
    failed = [(label, r) for label, r in zip(labels, results) if isinstance(r, Exception)]
    assert not failed, f"{len(failed)} failed; first: {failed[0][0]}\n{failed[0][1]}"
    for f, r in zip(funcs, results):
        assert isinstance(r, CudaBinary) and r.resources.registers > 0
        if r.launch.dynamic_shared_bytes:  # past 48 KB every tile is dynamic
            assert r.resources.shared_bytes == 0 == r.launch.shared_bytes
        elif f.workspaces:  # split-K uses one float of the staging tile: ptxas drops the rest
            assert r.resources.shared_bytes < r.launch.shared_bytes
        else:
            assert r.resources.shared_bytes == r.launch.shared_bytes  # 128-byte sized tiles


@pytest.mark.parametrize("arch", ARCHS)
def test_sampled_configs_over_48kb_use_dynamic_shared_memory(arch, nvcc):
    """Their tiles live in one extern dynamic block: ptxas reports no static shared
    memory, and the launch carries the bytes the tiling needs (up to the arch's opt-in)."""
    funcs, tilings = [], []
    for i, op in enumerate(OPS):
        for wl in workloads(op, DTYPES[i % 2]):
            for cfg in sample_dynamic(wl, 2, seed=3 + i, arch=arch):
                funcs.append(driver.lower(wl, target(arch), cfg))
                tilings.append(tc.tiling(cfg))
    assert len(funcs) >= 2 * len(OPS)
    results = compile_cuda_batch(funcs, target(arch), FAST_NVCC)
    limit = target(arch).cuda.max_shared_per_block_optin
    for f, t, r in zip(funcs, tilings, results):
        assert isinstance(r, CudaBinary), r
        assert r.resources.shared_bytes == 0 and r.launch.shared_bytes == 0
        assert 49152 < r.launch.dynamic_shared_bytes == t.shared_bytes <= limit
        assert f.attrs["launch"]["dynamic_shared_bytes"] == t.shared_bytes
        assert "extern __shared__ __align__(128) unsigned char at_shared[];" in r.source
        assert not re.search(r"^\s*__shared__", r.source, re.M)  # no static arrays


def test_dynamic_tiles_sit_at_fixed_aligned_offsets():
    wl = autotune.workload("matmul", M=4096, N=4096, K=4096, dtype="float16")
    src = driver.source(wl, target("sm_90"))  # the default: 128 x 128 x 32, 4 stages
    t = tc.tiling(driver.config_space(wl, target("sm_90")).default())
    a, b, _ = t.shared_tiles  # 128-byte multiples: the next tile starts where one ends
    assert "__half* const A_shared = reinterpret_cast<__half*>(at_shared + 0);" in src
    assert f"__half* const B_shared = reinterpret_cast<__half*>(at_shared + {a});" in src
    assert f"float* const C_staging = reinterpret_cast<float*>(at_shared + {a + b});" in src


def test_defaults_compile_with_release_flags_without_spilling(nvcc):
    large = [autotune.workload("matmul", M=4096, N=4096, K=4096, dtype=dt) for dt in DTYPES]
    funcs = [driver.lower(wl, target("sm_90")) for op in OPS for dt in DTYPES
             for wl in workloads(op, dt)] + [driver.lower(wl, target("sm_90")) for wl in large]
    for f, r in zip(funcs, compile_cuda_batch(funcs, target("sm_90"))):
        assert isinstance(r, CudaBinary), r
        assert r.resources.spill_stores == 0, f.name


def test_compile_prepacked_packs_nothing(nvcc):
    wl = autotune.workload("matmul", M=32, N=32, K=32, dtype="float16")
    kernel, pack = driver.compile_prepacked(wl, target())
    assert pack is None and "wmma::mma_sync" in kernel.source


def _params(src: str) -> str:
    return src[src.index("at_matmul(") if "at_matmul(" in src else src.index("at_conv2d("):]


def test_float16_source_is_typed_half():
    wl = autotune.workload("matmul", M=64, N=64, K=64, dtype="float16", epilogue=("bias",))
    src = driver.source(wl, target())
    head = _params(src).split(")", 1)[0]
    assert "const __half* __restrict__ A" in head and "__half* __restrict__ out" in head
    assert "float*" not in head  # no argument assumed to be float32
    assert "#include <cuda_fp16.h>" in src and "#include <mma.h>" in src
    assert "cuda_bf16.h" not in src
    assert re.search(r"__shared__ __align__\(128\) __half A_shared\[\d+\];", src)
    assert re.search(r"__shared__ __align__\(128\) float C_staging\[\d+\];", src)
    assert "nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, " \
           "nvcuda::wmma::row_major> a_frag[" in src
    assert "cp.async.cg.shared.global [%0], [%1], 16, %2;" in src  # 64 % 8 == 0: 16 bytes
    assert "cp.async.wait_group 0;" in src and "cp.async.commit_group;" in src
    assert "__float2half_rn(" in src and "__half2float(bias[" in src


def test_bfloat16_source_is_typed_bfloat16():
    wl = autotune.workload("conv2d", N=1, C=3, H=9, W=9, K=8, R=3, S=3, stride=2, pad=1,
                           dtype="bfloat16", epilogue=("scale_shift", "residual", "relu"))
    src = driver.source(wl, target())
    assert "#include <cuda_bf16.h>" in src and "cuda_fp16.h" not in src
    assert "const __nv_bfloat16* __restrict__ data" in src
    assert "__float2bfloat16_rn(" in src and "__bfloat162float(residual[" in src
    assert "__nv_bfloat16, nvcuda::wmma::row_major>" in src
    # C*R*S = 27 halves a row: the weight tile needs 4-byte copies? 27 is odd: elementwise
    assert "cp.async" not in src


def test_float32_source_has_no_includes():
    wl = autotune.workload("matmul", M=64, N=64, K=64)
    src = driver.source(wl, target())
    assert "#include" not in src and "wmma" not in src and "__half" not in src


def _tiny(body_of):
    """A one-warp kernel around ``body_of(tx, a_sh, frag_a, frag_b, acc, c_sh)``."""
    tx = Var("tx")
    a_sh = Buffer("a_sh", (256,), "float16", Scope.SHARED)
    c_sh = Buffer("c_sh", (256,), "float32", Scope.SHARED)
    fa = Buffer("fa", (1,), "float16", Scope.WMMA_A)
    fb = Buffer("fb", (1,), "float16", Scope.WMMA_B)
    acc = Buffer("acc", (1,), "float32", Scope.WMMA_ACC)
    out = Buffer("out", (256,), "float32")
    body = body_of(tx, a_sh, fa, fb, acc, c_sh)
    for b in (acc, fb, fa, c_sh, a_sh):
        body = Allocate(b, body)
    return PrimFunc("tiny", (out,), For(tx, 32, ForKind.THREAD_X, body))


SHAPE = (16, 16, 16)
Z = Const(0)


def test_a_fragment_has_one_layout():
    def body(tx, a_sh, fa, fb, acc, c_sh):
        return Seq([MmaLoad(fa, (Z,), a_sh, Z, 16, "row", SHAPE),
                    MmaLoad(fa, (Z,), a_sh, Z, 16, "col", SHAPE),
                    MmaLoad(fb, (Z,), a_sh, Z, 16, "row", SHAPE),
                    MmaFill(acc, (Z,), 0.0, SHAPE),
                    MmaSync(acc, (Z,), fa, (Z,), fb, (Z,), SHAPE),
                    MmaStore(c_sh, Z, 16, acc, (Z,), SHAPE)])
    with pytest.raises(CudaCodegenError, match="one layout"):
        generate_cuda(_tiny(body), target())


def test_no_warp_collective_statement_under_a_thread_guard():
    """A guard on threadIdx around a barrier is pushed inside; around an Mma statement it
    may split a warp, so the passes refuse."""
    def body(tx, a_sh, fa, fb, acc, c_sh):
        return IfThenElse(cmp("<", tx, 16), Seq([MmaFill(acc, (Z,), 0.0, SHAPE), Sync(),
                                                  MmaStore(c_sh, Z, 16, acc, (Z,), SHAPE)]))
    func = _tiny(body)
    with pytest.raises(CudaCodegenError, match="warp-collective"):
        prepare(func, Launch((1, 1, 1), (32, 1, 1), 0))


def test_passes_carry_the_new_statements():
    """One block: the launch loops are one trip, so their indices become 0 inside the Mma
    and Async statements too; every such statement survives, and so do the barriers
    before reads of shared memory (only the one after the last staging read is idle)."""
    from autotune.codegen.cuda.compiler import prepare_kernel
    from autotune.ir.analysis import stmt_exprs
    from autotune.ir.expr import walk
    from autotune.ir.stmt import AsyncCommit, AsyncCopy, AsyncWait, walk_stmts

    wl = autotune.workload("matmul", M=32, N=32, K=64, dtype="float16")
    func = driver.lower(wl, target())
    body, launch = prepare_kernel(func, target())
    assert launch.grid == (1, 1, 1)
    kinds = (MmaFill, MmaLoad, MmaSync, MmaStore, AsyncCopy, AsyncCommit, AsyncWait)

    def count(s):
        return {k.__name__: sum(isinstance(x, k) for x in walk_stmts(s)) for k in kinds}
    assert count(body) == count(func.body)
    syncs = [sum(isinstance(x, Sync) for x in walk_stmts(s)) for s in (func.body, body)]
    assert syncs == [3, 2]  # k loop, staging; the trailing one guards nothing
    names = {x.name for e in stmt_exprs(body) for x in walk(e) if isinstance(x, Var)}
    assert not names & {"bx", "by", "bz"}


@pytest.mark.parametrize("arch", ARCHS)
def test_sampled_split_configs_compile(arch, nvcc):
    """Split-K kernels (valid splits drawn per workload) through nvcc: the partials go out
    through wmma to global memory, the arrival is an atomicAdd between fences, and the
    reduction reads the workspace at L2; the workspaces are parameters after the output."""
    rng = np.random.default_rng(17)
    funcs = []
    for op in OPS:
        for dt in DTYPES:
            for wl in workloads(op, dt):
                sp = driver.config_space(wl, target(arch))
                drawn = [c for c in sp.sample(rng, 300) if c["split_k"] > 1 and sp.is_valid(c)]
                funcs += [driver.lower(wl, target(arch), c) for c in drawn[:2]]
    assert len(funcs) >= 2 * len(OPS) * 2
    results = compile_cuda_batch(funcs, target(arch), FAST_NVCC)
    failed = [r for r in results if isinstance(r, Exception)]
    assert not failed, f"{len(failed)} failed; first: {failed[0]}"
    for f, r in zip(funcs, results):
        assert isinstance(r, CudaBinary)
        src = r.source
        assert "atomicAdd(&split_counters[" in src and src.count("__threadfence();") == 2
        assert "__ldcg(&split_partials[" in src
        assert "store_matrix_sync(split_partials + " in src
        head = next(line for line in src.splitlines() if "__global__" in line)
        assert head.endswith("float* __restrict__ split_partials, "
                             "float* __restrict__ split_counters) {"), head
