"""Every CPU template: a hundred sampled configs of each operator compiled by LLVM and checked
against numpy.

Shapes include prime and odd extents, stride 2, pad 0/1/3, 1x1 and 7x7 kernels and
asymmetric stride/pad; epilogue chains rotate over the configs of each case.
"""
from __future__ import annotations

import itertools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

CONFIGS_PER_OP = 100
# Another sample where the kernels are built for a forced CPU (make test-avx2 runs this file
# again so): a CI run on an AVX-512 host checks 200 different configs of each operator.
SAMPLE_SEED = 8 if os.environ.get("AUTOTUNE_HOST_CPU") else 7
EPILOGUES = [(), ("bias",), ("scale_shift",), ("relu",), ("bias", "relu"), ("scale_shift", "relu"),
             ("bias", "relu6"), ("bias", "residual", "relu"), ("scale_shift", "residual"),
             ("bias", "hardswish"), ("bias", "residual", "silu"), ("gelu",)]
SHAPES = {
    "matmul": [dict(M=97, N=31, K=13), dict(M=16, N=48, K=33), dict(M=5, N=7, K=64),
               dict(M=1, N=37, K=13)],  # M = 1: the GEMV template
    "batch_matmul": [dict(B=3, M=17, N=31, K=9), dict(B=2, M=8, N=32, K=16)],
    "conv2d": [
        dict(N=1, C=3, H=11, W=13, K=8, R=3, S=3, stride=1, pad=1),
        dict(N=2, C=4, H=9, W=9, K=5, R=1, S=1, stride=2, pad=0),
        dict(N=1, C=2, H=9, W=10, K=4, R=7, S=7, stride=1, pad=3),
        dict(N=1, C=3, H=12, W=11, K=6, R=3, S=5, stride=(2, 1), pad=(0, 2)),
        dict(N=1, C=4, H=10, W=10, K=4, R=3, S=3, stride=1, pad=1, dilation=2),
    ],
    "group_conv2d": [
        dict(N=1, C=8, H=11, W=13, K=12, R=3, S=3, stride=1, pad=1, groups=4),
        dict(N=2, C=6, H=9, W=9, K=4, R=1, S=1, stride=2, pad=0, groups=2),
        dict(N=1, C=32, H=8, W=7, K=32, R=3, S=3, stride=2, pad=1, groups=2,
             layout="NCHW8c"),
        dict(N=2, C=64, H=6, W=6, K=32, R=3, S=3, stride=1, pad=1, groups=2,
             layout="NCHW16c>NCHW8c", prepacked=True),
    ],
    "depthwise_conv2d": [
        dict(N=1, C=4, H=11, W=13, R=3, S=3, stride=1, pad=1, multiplier=1),
        dict(N=2, C=3, H=9, W=10, R=3, S=3, stride=2, pad=0, multiplier=2),
        dict(N=1, C=2, H=10, W=9, R=7, S=7, stride=1, pad=3, multiplier=1),
        dict(N=1, C=5, H=31, W=17, R=5, S=3, stride=(1, 2), pad=(2, 1), multiplier=1),
    ],
}


def _packed(wl, kernel, args: list) -> list:
    """``args`` as ``kernel`` takes them: a prepacked kernel's weight packed by its packing
    kernel (the output, last, is the same array)."""
    from autotune.schedule.prepack import pack_operand

    return args if kernel.pack is None else pack_operand(wl, kernel.pack, args)


def _check_chunk(op: str, jobs: list[tuple[dict, tuple, int]]) -> list[str]:
    """Compile and run each (params, epilogue, config index); describe the failures."""
    import autotune
    from autotune import driver

    target = autotune.Target("llvm")
    failures = []
    for params, epi, index in jobs:
        wl = autotune.workload(op, epilogue=epi, **params)
        args = wl.random_args(index)
        ref = wl.reference(args)
        kernel = autotune.compile(wl, target, driver.config_space(wl, target).get(index))
        kernel(*_packed(wl, kernel, args))
        err = float(np.nanmax(np.abs(args[-1] - ref))) if not np.isnan(args[-1]).any() else np.inf
        if not err <= 1e-4 * max(1.0, float(np.abs(ref).max())):
            failures.append(f"{wl} config {index}: max error {err}")
    return failures


def _sample_jobs(op: str) -> list[tuple[dict, tuple, int]]:
    import autotune
    from autotune import driver

    target = autotune.Target("llvm")
    rng = np.random.default_rng(SAMPLE_SEED)
    jobs = []
    cases = itertools.cycle(itertools.product(SHAPES[op], EPILOGUES))
    while len(jobs) < CONFIGS_PER_OP:
        params, epi = next(cases)
        sp = driver.config_space(autotune.workload(op, epilogue=epi, **params), target)
        cfg = next(c for c in iter(lambda: sp.sample(rng, 1)[0], None) if sp.is_valid(c))
        jobs.append((params, epi, cfg.index))
    return jobs


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(SHAPES))
def test_sampled_configs_match_numpy(op):
    jobs = _sample_jobs(op)
    assert len(jobs) >= CONFIGS_PER_OP
    # spawned, not forked: a forked child deadlocks in libgomp or llvmlite when this process
    # has already run a kernel (their threads' locks are copied held)
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        chunks = [jobs[i::2] for i in range(2)]
        failures = [f for part in pool.map(_check_chunk, [op, op], chunks) for f in part]
    assert not failures, "\n".join(failures[:10])


@pytest.mark.parametrize("op", sorted(SHAPES))
def test_default_config_matches_numpy(op):
    import autotune

    for params in SHAPES[op]:
        for epi in EPILOGUES[::2]:
            wl = autotune.workload(op, epilogue=epi, **params)
            args = wl.random_args(0)
            kernel = autotune.compile(wl, "llvm")
            kernel(*_packed(wl, kernel, args))
            np.testing.assert_allclose(args[-1], wl.reference(args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act", ["hardswish", "hardsigmoid", "sigmoid", "silu", "gelu"])
def test_activations_match_numpy_across_their_range(act):
    """Each activation's kernel (tanh and erf as rational functions) against numpy's exact
    function, on outputs spread over [-40, 40]: both saturated ends and the curve between."""
    import autotune

    for op in ("conv2d", "depthwise_conv2d", "matmul"):
        wl = autotune.workload(op, epilogue=("bias", act), **SHAPES[op][0])
        plain = autotune.workload(op, epilogue=("bias",), **SHAPES[op][0])
        args = wl.random_args(0)
        args[0] = args[0] * (40 / np.abs(plain.reference(args)).max())  # outputs to +-40
        pre = plain.reference(args)
        assert pre.min() < -8 and pre.max() > 8 and (abs(pre) < 1).any()
        autotune.compile(wl, "llvm")(*args)
        ref = wl.reference(args)  # within 1e-6 of the outputs' scale (40): 100x the run's
        np.testing.assert_allclose(args[-1], ref, rtol=1e-5, atol=1e-6 * np.abs(ref).max())


@pytest.mark.parametrize("op", sorted(SHAPES))
def test_relu6_epilogue_clips_both_ends(op):
    import autotune

    wl = autotune.workload(op, epilogue=("bias", "relu6"), **SHAPES[op][0])
    args = [a * 10 for a in wl.random_args(0)[:-1]] + [wl.random_args(0)[-1]]
    ref = wl.reference(args)
    assert (ref == 6).any() and (ref == 0).any() and ((ref > 0) & (ref < 6)).any()
    autotune.compile(wl, "llvm")(*args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
