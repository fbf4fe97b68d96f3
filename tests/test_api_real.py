"""REAL PATH: tune/best/build with the LocalExecutor timing kernels from the LLVM codegen.

Nothing here is faked: configs are compiled by the CPU templates, built in worker processes,
timed on this machine and checked against numpy. Short budgets keep it to tens of seconds.
"""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune import api
from autotune.measure import LocalExecutor, MeasureOptions

pytestmark = pytest.mark.slow

# Short timing protocol: these tests check the path, not the numbers.
OPTIONS = MeasureOptions(repeat=3, min_repeat_ms=2.0, n_build_workers=2)
MATMUL = autotune.workload("matmul", M=64, N=64, K=64)
CONV = autotune.workload("conv2d", N=1, C=16, H=14, W=14, K=16, R=3, S=3, stride=1, pad=1,
                         epilogue=("bias", "relu"))


@pytest.fixture(scope="module")
def target():
    target = autotune.Target("llvm")
    try:
        autotune.compile(MATMUL, target)
    except Exception as exc:  # the CPU path is not there: nothing here can run
        pytest.skip(f"real CPU path unavailable: {type(exc).__name__}: {exc}")
    return target


@pytest.fixture(scope="module")
def executor(target):
    ex = LocalExecutor(target, OPTIONS)
    yield ex
    ex.close()


def _check_against_numpy(kernel, wl):
    args = wl.random_args(seed=11)
    kernel(*args)
    np.testing.assert_allclose(args[-1], wl.reference(args), rtol=1e-4, atol=1e-4)


def test_real_matmul_tune_best_build(target, executor, tmp_path):
    url = f"sqlite:///{tmp_path / 'real.db'}"
    result = autotune.tune(MATMUL, target, trials=32, db=url, executor=executor, seed=0)
    assert result.ok and result.trials == 32 and result.best_gflops > 0
    assert len(result.retimed) >= 3 and all(r.retimed_cost for r in result.retimed)
    found = autotune.best(MATMUL, target, db=url)
    assert found is not None and found.gflops > 0
    # the re-timing window's winner (or, were it set aside as noisy, the fastest first
    # measurement, one of its members); the database agrees
    assert found.config.index in {r.config_index for r in result.retimed}
    assert (found.config.index, found.gflops) == (result.best_config.index,
                                                  pytest.approx(result.best_gflops))

    api.clear_build_cache()
    kernel = autotune.build(MATMUL, target, db=url)
    assert api.build_cache_info().misses == 1
    _check_against_numpy(kernel, MATMUL)
    again = autotune.build(MATMUL.to_dict(), target.key, db=url)
    info = api.build_cache_info()
    assert again is kernel and (info.hits, info.misses) == (1, 1)  # no second compile


def test_real_conv2d_with_its_own_executor(target, tmp_path):
    url = f"sqlite:///{tmp_path / 'real.db'}"
    # executor=None: tune() makes a LocalExecutor from `measure_options` and closes it.
    result = autotune.tune(CONV, target, trials=30, db=url, measure_options=OPTIONS,
                           tuner="random", batch_size=15)
    assert result.ok and result.trials == 30
    kernel = autotune.build(CONV, target, db=url)
    _check_against_numpy(kernel, CONV)
