"""nvcc compiles the CUDA C of at least 100 sampled valid configs per template (spread over
shapes and epilogues, batched into few nvcc calls), and the full build path works."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

import autotune
from autotune import driver
from autotune.codegen.cuda.compiler import (
    CudaBinary,
    CudaCompileError,
    compile_cuda,
    compile_cuda_batch,
    compile_cuda_with_info,
)
from tests.cuda.cuda_cases import EPILOGUES, FAST_NVCC, OPS, SHAPES, spread, target

PER_TEMPLATE = 100
CHUNK = 50  # kernels per nvcc call; two calls run at once


@pytest.mark.parametrize("op", OPS)
def test_sampled_configs_compile(op, nvcc):
    pairs = spread(op, PER_TEMPLATE, seed=7)
    assert len(pairs) >= PER_TEMPLATE
    assert len({wl.epilogue for wl, _ in pairs}) == len(EPILOGUES)  # every epilogue is covered
    funcs = [driver.lower(wl, target(), cfg) for wl, cfg in pairs]
    chunks = [funcs[i:i + CHUNK] for i in range(0, len(funcs), CHUNK)]
    with ThreadPoolExecutor(2) as pool:
        results = [r for rs in pool.map(lambda c: compile_cuda_batch(c, target(), FAST_NVCC),
                                        chunks) for r in rs]
    failed = [(pairs[i], r) for i, r in enumerate(results) if isinstance(r, Exception)]
    assert not failed, f"{len(failed)} failed; first: {failed[0][0]}\n{failed[0][1]}"
    for f, r in zip(funcs, results):
        assert isinstance(r, CudaBinary)
        assert f.attrs["launch"]["block"] == list(r.launch.block)
        assert r.resources.registers > 0
        assert r.launch.shared_bytes - 16 < r.resources.shared_bytes <= r.launch.shared_bytes


@pytest.mark.parametrize("op", OPS)
def test_default_configs_compile_with_release_flags(op, nvcc):
    epi = ("scale_shift", "relu") if op == "depthwise_conv2d" else ("bias", "relu")
    funcs = [driver.lower(autotune.workload(op, epilogue=epi, **shape), target())
             for shape in SHAPES[op]]
    for f, r in zip(funcs, compile_cuda_batch(funcs, target())):
        assert isinstance(r, CudaBinary), r
        assert r.resources.spill_stores == 0
        assert f.attrs["cuda_resources"]["registers"] == r.resources.registers


def test_compile_cuda_records_launch_and_resources(nvcc):
    wl = autotune.workload("conv2d", epilogue=("scale_shift", "relu"), **SHAPES["conv2d"][0])
    f = driver.lower(wl, target())
    source, cubin = compile_cuda(f, target())
    assert cubin[:4] == b"\x7fELF"
    assert 'extern "C" __global__ void __launch_bounds__(' in source
    assert f.attrs["cuda_kernel"] in source
    launch = f.attrs["launch"]
    assert set(launch) == {"grid", "block", "shared_bytes", "dynamic_shared_bytes"}
    res = f.attrs["cuda_resources"]
    assert {"registers", "spill_stores", "spill_loads", "shared_bytes"} <= set(res)


def test_driver_build_makes_a_cuda_artifact(nvcc):
    wl = autotune.workload("depthwise_conv2d", epilogue=("scale_shift", "relu"),
                           **SHAPES["depthwise_conv2d"][0])
    art = driver.build(wl, target())
    assert art.binary[:4] == b"\x7fELF" and "__syncthreads();" in art.source
    assert art.func.attrs["launch"]["grid"][2] == 2 * 3  # batch x channels on blockIdx.z


def test_a_bad_kernel_in_a_batch_is_isolated(nvcc, monkeypatch):
    import autotune.codegen.cuda.compiler as cuda
    wl = autotune.workload("matmul", **SHAPES["matmul"][0])
    good, bad = driver.lower(wl, target()), driver.lower(wl, target())
    real = cuda.generate_cuda

    def broken(func, tgt, name=None):
        src, launch = real(func, tgt, name)
        return (src.replace("__syncthreads();", "__syncthreads() error;") if func is bad
                else src), launch

    monkeypatch.setattr(cuda, "generate_cuda", broken)
    out = compile_cuda_batch([good, bad], target(), FAST_NVCC)
    assert isinstance(out[0], CudaBinary)
    assert isinstance(out[1], CudaCompileError) and "error" in str(out[1])
    with pytest.raises(CudaCompileError, match="nvcc failed"):
        compile_cuda_with_info(bad, target())
