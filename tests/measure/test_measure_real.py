"""The real path: LLVM-compiled kernels built in the pool and timed in the runner."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.codegen.llvm import compiler as llvm
from autotune.codegen.llvm import runtime as cpu_runtime
from autotune.driver import config_space
from autotune.measure import (
    ErrorKind,
    LocalBuilder,
    LocalExecutor,
    LocalRunner,
    MeasureInput,
    MeasureOptions,
)
from autotune.target import Target
from tests.measure.measure_fakes import CopyWorkload, hand_build

pytestmark = pytest.mark.skipif(
    not (hasattr(llvm, "compile_llvm_object") and hasattr(cpu_runtime, "load_cpu_kernel")),
    reason="LLVM object compilation (driver.build/load) not available yet")

OPTS = MeasureOptions(repeat=3, min_repeat_ms=2.0, n_build_workers=2, run_timeout=5.0)


def test_segfaulting_kernel_is_a_runtime_error_and_the_next_one_is_timed():
    target, wl = Target("llvm"), CopyWorkload(1024)
    with LocalExecutor(target, OPTS, builder=LocalBuilder(2, 10.0, build_fn=hand_build),
                       runner=LocalRunner(target, OPTS)) as ex:
        results = ex.submit([MeasureInput(wl, target, m) for m in ("copy", "crash", "copy")])
    assert [r.error for r in results] == [ErrorKind.NONE, ErrorKind.RUNTIME, ErrorKind.NONE]
    assert "runner process died (signal" in results[1].error_msg
    assert results[0].build_s > 0 and results[0].cost < 1e-3


def test_random_matmul_configs_are_built_checked_and_timed():
    target = Target("llvm")
    wl = autotune.workload("matmul", M=64, N=64, K=64)
    configs = config_space(wl, target).sample(np.random.default_rng(0), 6)
    with LocalExecutor(target, OPTS) as ex:
        results = ex.submit([MeasureInput(wl, target, c) for c in configs])
    assert all(r.error in (ErrorKind.NONE, ErrorKind.INSTANTIATION) for r in results), \
        [(r.error, r.error_msg[:200]) for r in results if not r.ok]
    ok = [r for r in results if r.ok]
    assert ok and all(r.cost > 0 for r in ok)
    # a busy host (CI's builds beside the runner) may cut the repeats short: fewer costs,
    # then, but at least one, and said so
    assert all(len(r.costs) == 3 or (r.extra.get("truncated") and 1 <= len(r.costs) < 3)
               for r in ok), [(len(r.costs), r.extra) for r in ok]
