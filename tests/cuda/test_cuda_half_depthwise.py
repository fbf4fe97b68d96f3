"""Depthwise convs in float16 and bfloat16 on CUDA cores: sampled configs of every shape
run right in the execution model within the dtype's tolerance, nvcc builds them (half
arguments, float32 shared tiles and accumulator); on a GPU host
(marker ``cuda_device``) the built kernels match the reference on the device."""
from __future__ import annotations

import pytest

import autotune
from autotune import driver
from autotune.codegen.cuda.compiler import compile_cuda_batch
from autotune.measure.correctness import check_output
from autotune.ops import dtype_info
from tests.cuda.cuda_cases import EPILOGUES, FAST_NVCC, SHAPES, sample_valid, target

HALF = ("float16", "bfloat16")
SHAPE_IDS = range(len(SHAPES["depthwise_conv2d"]))


def _cases(dtype: str, per: int) -> list[tuple[autotune.Workload, autotune.space.Config]]:
    """Default and ``per`` sampled configs of each shape, the epilogues taking turns."""
    out = []
    for i, shape in enumerate(SHAPES["depthwise_conv2d"]):
        for k in range(2):
            epi = EPILOGUES[(2 * i + k + 4) % len(EPILOGUES)]
            wl = autotune.workload("depthwise_conv2d", epilogue=epi, dtype=dtype, **shape)
            sp = driver.config_space(wl, target())
            out += [(wl, c) for c in [sp.default(), *sample_valid(wl, per, seed=10 * i + k)]]
    return out


@pytest.mark.parametrize("dtype", HALF)
def test_sampled_configs_match_numpy_within_the_dtype(dtype):
    tol = dtype_info(dtype).rtol
    for j, (wl, cfg) in enumerate(_cases(dtype, per=2)):
        err = autotune.simulate_cuda(wl, cfg, target(), seed=j)
        assert err < tol, f"{wl} {dict(cfg)}: max error {err}"


@pytest.mark.parametrize("dtype", HALF)
def test_nvcc_builds_half_arguments_with_float32_tiles(dtype, nvcc):
    cases = _cases(dtype, per=1)
    funcs = [driver.lower(wl, target(), cfg) for wl, cfg in cases]
    built = compile_cuda_batch(funcs, target(), FAST_NVCC)
    c_type = dtype_info(dtype).c_type
    for (wl, cfg), b in zip(cases, built):
        assert not isinstance(b, Exception), f"{wl} {dict(cfg)}: {b}"
        assert f"const {c_type}* __restrict__ data" in b.source
        assert f"{c_type}* __restrict__ out" in b.source
        # widened once into float32 tiles; the products read them without conversions
        assert "__shared__ __align__(16) float data_pad_shared" in b.source
        assert "+= data_pad_shared[" in b.source


@pytest.mark.cuda_device
@pytest.mark.parametrize("dtype", HALF)
def test_half_depthwise_kernels_match_the_reference_on_the_gpu(dtype, gpu, nvcc):
    for i, (wl, cfg) in enumerate(_cases(dtype, per=2)):
        kernel = autotune.compile(wl, target(), cfg)
        args = wl.random_args(i)
        ref = wl.reference(args[:-1])
        kernel(*args)
        wrong = check_output(args[-1], ref, 0.0, 0.0, dtype)
        assert wrong is None, f"{wl} {dict(cfg)}: {wrong}"
