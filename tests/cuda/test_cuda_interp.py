"""The loop AST of sampled CUDA configs, run by the reference interpreter (thread loops
sequential), matches numpy: indexing, tails, padding, strides and epilogues without a GPU."""
from __future__ import annotations

import pytest
from cuda_cases import EPILOGUES, SHAPES, check_interp, sample_valid

import autotune

CASES = [(op, i) for op, shapes in SHAPES.items() for i in range(len(shapes))]
PER_EPILOGUE = 3


@pytest.mark.parametrize("op,shape", CASES, ids=[f"{op}-{i}" for op, i in CASES])
def test_sampled_configs_match_numpy(op, shape):
    checked = 0
    for k, epi in enumerate(EPILOGUES):
        wl = autotune.workload(op, epilogue=epi, **SHAPES[op][shape])
        for cfg in sample_valid(wl, PER_EPILOGUE, seed=100 * shape + k):
            err = check_interp(wl, cfg, seed=k)
            assert err < 1e-4, f"{wl} {dict(cfg)}: max error {err}"
            checked += 1
    assert checked >= PER_EPILOGUE * len(EPILOGUES) - 2


@pytest.mark.parametrize("op", list(SHAPES))
def test_default_config_matches_numpy(op):
    for shape in SHAPES[op]:
        wl = autotune.workload(op, epilogue=("scale_shift", "relu"), **shape)
        assert check_interp(wl, None) < 1e-4, wl
