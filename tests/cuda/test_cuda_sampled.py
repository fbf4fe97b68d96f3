"""Sampled CUDA configs, run in the execution model (``autotune.simulate_cuda``: the kernel
nvcc gets, every thread, barrier phases, poisoned shared memory), match numpy: indexing,
tails, padding, strides and epilogues without a GPU."""
from __future__ import annotations

import pytest

import autotune
from tests.cuda.cuda_cases import EPILOGUES, SHAPES, sample_valid

CASES = [(op, i) for op, shapes in SHAPES.items() for i in range(len(shapes))]
PER_EPILOGUE = 3


@pytest.mark.parametrize("op,shape", CASES, ids=[f"{op}-{i}" for op, i in CASES])
def test_sampled_configs_match_numpy(op, shape):
    checked = 0
    for k, epi in enumerate(EPILOGUES):
        wl = autotune.workload(op, epilogue=epi, **SHAPES[op][shape])
        for cfg in sample_valid(wl, PER_EPILOGUE, seed=100 * shape + k):
            err = autotune.simulate_cuda(wl, cfg, seed=k)
            assert err < 1e-4, f"{wl} {dict(cfg)}: max error {err}"
            checked += 1
    assert checked >= PER_EPILOGUE * len(EPILOGUES) - 2


@pytest.mark.parametrize("op", list(SHAPES))
def test_default_config_matches_numpy(op):
    for shape in SHAPES[op]:
        wl = autotune.workload(op, epilogue=("scale_shift", "relu"), **shape)
        assert autotune.simulate_cuda(wl) < 1e-4, wl


def test_conv2d_reduction_tiles_need_not_divide():
    """Channel and kernel-row tiles that overhang C and R: the tail's loads are guarded."""
    from autotune import driver
    from tests.cuda.cuda_cases import target

    wl = autotune.workload("conv2d", epilogue=("bias",), **SHAPES["conv2d"][0])  # C=5, R=3
    sp = driver.config_space(wl, target())
    values = dict(sp.default())
    values.update(tile_rc=(2, 4), tile_ry=(2, 2))
    cfg = sp.config(values)
    assert sp.invalid_reason(cfg) is None
    assert autotune.simulate_cuda(wl, cfg) < 1e-4
