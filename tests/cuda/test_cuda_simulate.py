"""The CUDA execution model (``autotune.simulate_cuda``): it runs what nvcc gets, catches
each class of violation on small hand-built kernels, and caught the depthwise bug that the
H100 showed (a tile-bound guard around the cooperative fills)."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune import driver
from autotune.codegen.cuda import passes
from autotune.codegen.cuda.passes import Launch
from autotune.codegen.cuda.simulate import CudaExecutionError, run_kernel
from autotune.ir.expr import Const, Var, cmp
from autotune.ir.stmt import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    PrimFunc,
    Scope,
    Seq,
    Store,
    Sync,
)
from tests.cuda.cuda_cases import target

# Depthwise shapes that ran wrong on the H100 at their default configs (output tiles that do
# not divide the output), with and without the epilogue
H100_WRONG = [dict(N=2, C=4, H=10, W=10, R=5, S=5, stride=1, pad=2),
              dict(N=1, C=1024, H=7, W=7, R=3, S=3, stride=1, pad=1),
              dict(N=1, C=128, H=56, W=56, R=3, S=3, stride=2, pad=1)]
EPILOGUES = [(), ("scale_shift", "relu")]


@pytest.mark.parametrize("epilogue", EPILOGUES, ids=["plain", "scale_shift_relu"])
@pytest.mark.parametrize("shape", H100_WRONG, ids=["10x10_5x5", "1024x7x7", "128x56x56_s2"])
def test_depthwise_edge_blocks_are_right(shape, epilogue):
    wl = autotune.workload("depthwise_conv2d", epilogue=epilogue, **shape)
    assert autotune.simulate_cuda(wl) < 1e-5


@pytest.mark.parametrize("shape", H100_WRONG, ids=["10x10_5x5", "1024x7x7", "128x56x56_s2"])
def test_the_old_depthwise_code_fails_the_model(shape, monkeypatch):
    """Before the fix the barrier pass kept the output-bound guard around the fills: edge
    blocks left part of the shared tiles unwritten and read them anyway."""
    wl = autotune.workload("depthwise_conv2d", **shape)
    fixed = driver.source(wl, target())
    monkeypatch.setattr(passes, "is_shared_fill", lambda s: False)  # the old rule
    assert driver.source(wl, target()) != fixed
    with pytest.raises(CudaExecutionError) as info:
        autotune.simulate_cuda(wl)
    e = info.value
    assert e.kind == "uninitialized"
    assert e.buffer in ("data_pad_shared", "weight_shared")
    assert e.index is not None and e.block is not None and e.thread is not None
    assert f"{e.buffer}[{e.index}]" in str(e) and str(e.block) in str(e)


def test_simulate_cuda_runs_the_prepared_body(monkeypatch):
    """The model runs the statements the emitter prints, not an earlier form of them."""
    wl = autotune.workload("matmul", M=13, N=37, K=11)
    seen = []
    real = passes.prepare

    def spy(func, launch):
        body = real(func, launch)
        seen.append(body)
        return body
    monkeypatch.setattr(passes, "prepare", spy)
    monkeypatch.setattr("autotune.codegen.cuda.compiler.prepare", spy)
    assert autotune.simulate_cuda(wl, seed=3) < 1e-5
    assert len(seen) == 1


def test_public_api_and_bad_targets():
    wl = autotune.workload("matmul", M=8, N=8, K=8)
    assert autotune.simulate_cuda(wl, None, "cuda -arch=sm_80", seed=1) < 1e-5
    assert issubclass(autotune.CudaExecutionError, RuntimeError)
    with pytest.raises(ValueError, match="not a CUDA target"):
        autotune.simulate_cuda(wl, target="llvm")


# ---------------------------------------------------------------- hand-built kernels

def _kernel(body_of, n=8, blocks=1, shared=8):
    """A one-dimensional kernel: ``inp`` (n floats) -> ``out`` (n floats), with a shared
    tile ``tile``; ``body_of(bx, tx, inp, out, tile)`` builds the body inside the launch
    loops."""
    inp, out = Buffer("inp", (n,)), Buffer("out", (n,))
    tile = Buffer("tile", (shared,), scope=Scope.SHARED)
    bx, tx = Var("bx"), Var("tx")
    threads = n // blocks
    body = For(bx, blocks, ForKind.BLOCK_X,
               For(tx, threads, ForKind.THREAD_X,
                   Allocate(tile, body_of(bx, tx, inp, out, tile))))
    func = PrimFunc("k", (inp, out), body)
    launch = Launch((blocks, 1, 1), (threads, 1, 1), shared * 4)
    return func, launch


def _run(func, launch, n=8):
    args = [np.arange(1, n + 1, dtype=np.float32), np.full(n, np.nan, np.float32)]
    run_kernel(func, func.body, launch, args)
    return args[-1]


def _shift_body(sync: bool):
    """Each thread loads its element into the tile, then reads its neighbour's."""
    def body(bx, tx, inp, out, tile):
        parts = [Store(tile, (tx,), inp[tx])]
        if sync:
            parts.append(Sync())
        parts.append(Store(out, (tx,), tile[(tx + 1) % 8]))
        return Seq(parts)
    return body


def test_a_correct_exchange_through_shared_memory_runs():
    out = _run(*_kernel(_shift_body(sync=True)))
    assert out.tolist() == [2, 3, 4, 5, 6, 7, 8, 1]


def test_a_missing_barrier_is_a_race():
    with pytest.raises(CudaExecutionError) as info:
        _run(*_kernel(_shift_body(sync=False)))
    e = info.value
    assert e.kind == "race" and e.buffer == "tile"
    assert {e.thread, e.other_thread} == {(e.index, 0, 0), ((e.index - 1) % 8, 0, 0)}


def test_two_threads_writing_one_shared_element_race():
    def body(bx, tx, inp, out, tile):
        return Seq([Store(tile, (tx // 2,), inp[tx]), Sync(), Store(out, (tx,), tile[tx // 2])])
    with pytest.raises(CudaExecutionError, match="race"):
        _run(*_kernel(body))


def test_reading_shared_memory_nobody_wrote():
    def body(bx, tx, inp, out, tile):
        fill = IfThenElse(cmp("<", tx, 4), Store(tile, (tx,), inp[tx]))
        return Seq([fill, Sync(), Store(out, (tx,), tile[tx])])
    with pytest.raises(CudaExecutionError) as info:
        _run(*_kernel(body))
    e = info.value
    assert (e.kind, e.buffer, e.index, e.block, e.thread) == \
        ("uninitialized", "tile", 4, (0, 0, 0), (4, 0, 0))


def test_a_barrier_only_some_threads_reach():
    def body(bx, tx, inp, out, tile):
        guarded = Seq([Store(tile, (tx,), inp[tx]), Sync(), Store(out, (tx,), tile[tx])])
        return IfThenElse(cmp("<", tx, 5), guarded)
    with pytest.raises(CudaExecutionError) as info:
        _run(*_kernel(body))
    e = info.value
    assert e.kind == "divergent_barrier" and "5 of 8 threads" in str(e)
    assert e.thread == (5, 0, 0)


def test_out_of_bounds_global_access():
    def body(bx, tx, inp, out, tile):
        return Store(out, (tx,), inp[tx + 1])
    with pytest.raises(CudaExecutionError) as info:
        _run(*_kernel(body))
    e = info.value
    assert (e.kind, e.buffer, e.index, e.thread) == ("out_of_bounds", "inp", 8, (7, 0, 0))


def test_blocks_writing_one_output_element_race():
    def body(bx, tx, inp, out, tile):
        return Store(out, (tx,), inp[bx * 4 + tx])
    func, launch = _kernel(body, blocks=2)
    with pytest.raises(CudaExecutionError) as info:
        _run(func, launch)
    assert info.value.kind == "race" and info.value.block != info.value.other_block


def test_registers_start_as_poison():
    acc = Buffer("acc", (2,), scope=Scope.LOCAL)

    def body(bx, tx, inp, out, tile):
        init = Store(acc, (Const(0),), Const(0.0))
        return Allocate(acc, Seq([init, Store(out, (tx,), acc[0] + acc[1])]))
    with pytest.raises(CudaExecutionError) as info:
        _run(*_kernel(body))
    assert (info.value.kind, info.value.buffer, info.value.index) == ("uninitialized", "acc", 1)


def test_index_arithmetic_that_overflows_int():
    def body(bx, tx, inp, out, tile):
        # 7 * 7 * 300000001 is past 2^31 - 1: C's int wraps around (nonlinear: no folding)
        return Store(out, (tx,), inp[(tx * tx * 300_000_001) % 8])
    with pytest.raises(CudaExecutionError, match="int_overflow"):
        _run(*_kernel(body))

