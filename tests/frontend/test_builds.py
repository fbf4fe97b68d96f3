"""A model's kernels built in worker processes (`frontend.builds`): the kernels they link
here are right, and every way the workers can fall short ends in this process."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import autotune
from autotune import driver
from autotune.frontend import builds
from autotune.measure.result import MeasureUnavailable
from autotune.target import Target

TARGET = Target("llvm")
# distinct small workloads, enough for the parallel path
WORKLOADS = [autotune.workload("matmul", M=m, N=24, K=16)
             for m in range(3, 3 + builds.PARALLEL_MIN)]


def _defaults(wls):
    return {wl: driver.config_space(wl, TARGET).default() for wl in wls}


def _check(kernels):
    for wl, kernel in kernels.items():
        args = wl.random_args(0)
        kernel(*args)
        np.testing.assert_allclose(args[-1], wl.reference(args[:-1]), rtol=1e-5, atol=1e-5)


def _no_local_builds(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("built in this process")
    monkeypatch.setattr(builds, "compile_kernel", refuse)


def test_workers_build_every_kernel_and_they_run_right(monkeypatch):
    _no_local_builds(monkeypatch)
    kernels = builds.build_kernels(_defaults(WORKLOADS), TARGET, workers=2)
    assert set(kernels) == set(WORKLOADS)
    _check(kernels)


def test_few_kernels_build_here_without_workers(monkeypatch):
    def no_pool(*a, **k):
        raise AssertionError("workers started")
    monkeypatch.setattr(builds, "LocalBuilder", no_pool)
    few = WORKLOADS[: builds.PARALLEL_MIN - 1]
    _check(builds.build_kernels(_defaults(few), TARGET, workers=2))
    _check(builds.build_kernels(_defaults(WORKLOADS), TARGET, workers=1))


def test_workers_that_cannot_start_leave_the_builds_here(monkeypatch):
    def unavailable(self, inputs, should_stop=None):
        raise MeasureUnavailable("no worker started")
        yield  # a generator, as the real one
    monkeypatch.setattr(builds.LocalBuilder, "build_iter", unavailable)
    _check(builds.build_kernels(_defaults(WORKLOADS), TARGET, workers=2))


def test_a_build_that_fails_in_a_worker_raises_its_own_error_here():
    configs = _defaults(WORKLOADS)
    bad = WORKLOADS[0]
    configs[bad] = 10**12  # type: ignore[assignment]  # no such point of its space
    with pytest.raises(IndexError, match="out of range"):
        builds.build_kernels(configs, TARGET, workers=2)


def _convs() -> torch.nn.Module:
    """A model of PARALLEL_MIN distinct conv workloads (each layer another width)."""
    widths = [3 + 2 * i for i in range(builds.PARALLEL_MIN + 1)]
    layers = [torch.nn.Conv2d(a, b, 3, padding=1) for a, b in zip(widths, widths[1:])]
    return torch.nn.Sequential(*layers).eval()


@pytest.mark.parametrize("setting, where", [("2", "workers"), ("1", "here")])
def test_compile_model_builds_where_the_setting_says(setting, where, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_BUILD_WORKERS", setting)
    if where == "workers":
        _no_local_builds(monkeypatch)
    else:
        monkeypatch.setattr(builds, "LocalBuilder", lambda *a, **k: pytest.fail("workers"))
    model, x = _convs(), torch.randn(1, 3, 12, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no records: the default schedules
        fast = autotune.compile_model(model, x, db="sqlite://", layout="nchw")
    with torch.no_grad():
        torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-4)
