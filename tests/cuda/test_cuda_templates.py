"""CUDA templates: spaces and validity (limits rejected before compiling), the shape of
the lowered loop AST, and shared-memory estimates that match what lowering allocates."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import autotune
from autotune import driver
from autotune.codegen.cuda.passes import launch_of
from autotune.ir.stmt import Allocate, For, ForKind, IfThenElse, Scope, Sync, walk_stmts
from tests.cuda.cuda_cases import OPS, SHAPES, sample_valid, target


def kinds(func) -> list[ForKind]:
    return [s.kind for s in walk_stmts(func.body) if isinstance(s, For)]


def allocs(func, scope: Scope) -> list[str]:
    return [s.buffer.name for s in walk_stmts(func.body)
            if isinstance(s, Allocate) and s.buffer.scope is scope]


def test_registry_has_every_cuda_template():
    for op in OPS:
        wl = autotune.workload(op, **SHAPES[op][0])
        sp = driver.config_space(wl, target())
        assert sp.name.startswith("cuda_") and sp.size > 100
        assert sp.invalid_reason(sp.default()) is None, sp.default()


@pytest.mark.parametrize("op", OPS)
def test_default_config_lowers_to_a_gpu_kernel(op):
    wl = autotune.workload(op, epilogue=("relu",), **SHAPES[op][0])
    f = driver.lower(wl, target())
    ks = kinds(f)
    assert ForKind.BLOCK_X in ks and ForKind.THREAD_X in ks
    assert sorted(allocs(f, Scope.SHARED))  # input and weight tiles
    assert len(allocs(f, Scope.SHARED)) == 2
    assert len(allocs(f, Scope.LOCAL)) == 1  # the register accumulator
    assert any(isinstance(s, Sync) for s in walk_stmts(f.body))
    assert not f.workspaces  # padding is inlined: one kernel, no temporaries


def test_matmul_schedule_structure():
    """Blocks outermost, then threads, then vthreads; the accumulator inside the threads;
    the shared tiles filled inside the outer k loop, between barriers."""
    wl = autotune.workload("matmul", M=64, N=64, K=32)
    sp = driver.config_space(wl, target())
    cfg = sp.config({**sp.default(), "tile_i": (4, 2, 8, 1), "tile_j": (2, 2, 8, 2),
                     "tile_k": (4, 8)})
    f = driver.lower(wl, target(), cfg)
    loops = [s for s in walk_stmts(f.body) if isinstance(s, For)]
    assert [s.kind for s in loops[:4]] == [ForKind.BLOCK_Y, ForKind.BLOCK_X, ForKind.THREAD_Y,
                                           ForKind.THREAD_X]
    assert [s.extent for s in loops[:4]] == [4, 2, 8, 8]
    assert kinds(f).count(ForKind.VTHREAD) == 2
    local = next(s for s in walk_stmts(f.body) if isinstance(s, Allocate))
    assert local.buffer.scope is Scope.LOCAL and local.buffer.size == 2 * 2 * 1 * 2
    ko = next(s for s in loops if s.var.name == "k.o")
    assert ko.extent == 4
    shared = [s.buffer for s in walk_stmts(ko.body)
              if isinstance(s, Allocate) and s.buffer.scope is Scope.SHARED]
    assert sorted(b.shape for b in shared) == [(8, 32), (16, 8)]
    assert sum(isinstance(s, Sync) for s in walk_stmts(ko.body)) >= 2


@pytest.mark.parametrize("op", OPS)
def test_block_shape_matches_lowering(op):
    """The validity predicate's estimates are what lowering builds: shared tiles, threads
    per block and the register tile, so rejecting on them is sound."""
    from autotune.schedule.templates import get_template
    tmpl = importlib.import_module(f"autotune.schedule.templates.{get_template(op, 'cuda').name}")
    for shape in SHAPES[op]:
        wl = autotune.workload(op, **shape)
        for cfg in sample_valid(wl, 8, seed=3):
            f = driver.lower(wl, target(), cfg)
            est = tmpl.block_shape(wl, cfg)
            launch = launch_of(f)
            assert launch.shared_bytes == est.shared_bytes, cfg
            assert launch.block == est.threads or op == "depthwise_conv2d", cfg
            assert max(launch.block) <= max(est.threads)
            local = [s.buffer.size for s in walk_stmts(f.body)
                     if isinstance(s, Allocate) and s.buffer.scope is Scope.LOCAL]
            assert local[0] <= est.local_floats


def _first_invalid(wl, needle: str):
    sp = driver.config_space(wl, target())
    rng = np.random.default_rng(0)
    for _ in range(200):
        for c in sp.sample(rng, 200):
            r = sp.invalid_reason(c)
            if r and needle in r:
                return c, r
    raise AssertionError(f"no config rejected for {needle!r}")


@pytest.mark.parametrize("op,shape,needle", [
    ("matmul", dict(M=1024, N=1024, K=1024), "threads per block"),
    ("matmul", dict(M=1024, N=1024, K=1024), "shared memory"),
    ("matmul", dict(M=1024, N=1024, K=1024), "virtual threads"),
    ("conv2d", dict(N=1, C=128, H=28, W=28, K=128, R=3, S=3, stride=1, pad=1), "threads in z"),
    ("depthwise_conv2d", dict(N=1, C=8, H=56, W=56, R=3, S=3, stride=1, pad=1),
     "threads per block"),
])
def test_over_limit_configs_are_rejected_before_compiling(op, shape, needle, monkeypatch):
    import autotune.codegen.cuda.compiler as cuda

    def no_nvcc(*a, **k):
        raise AssertionError("nvcc must not run for an invalid config")

    monkeypatch.setattr(cuda, "nvcc_cubin", no_nvcc)
    wl = autotune.workload(op, **shape)
    cfg, reason = _first_invalid(wl, needle)
    with pytest.raises(driver.InvalidConfig, match=needle):
        driver.build(wl, target(), cfg)
    assert needle in reason


def test_validity_counts_threads_per_block():
    wl = autotune.workload("matmul", M=1024, N=1024, K=1024)
    sp = driver.config_space(wl, target())
    ok = sp.config({**sp.default(), "tile_i": (32, 1, 32, 1), "tile_j": (32, 1, 32, 1)})
    assert sp.invalid_reason(ok) is None  # exactly 1024 threads
    over = sp.config({**sp.default(), "tile_i": (16, 1, 64, 1), "tile_j": (32, 1, 32, 1)})
    assert "2048 threads per block" in sp.invalid_reason(over)


def test_guards_keep_barriers_out_of_divergent_code():
    """Tails (13, 37) put guards in the kernel, none of them around a barrier."""
    wl = autotune.workload("matmul", M=13, N=37, K=11, epilogue=("bias",))
    for cfg in sample_valid(wl, 10):
        f = driver.lower(wl, target(), cfg)
        for s in walk_stmts(f.body):
            if isinstance(s, IfThenElse):
                assert not any(isinstance(x, Sync) for x in walk_stmts(s.then))
