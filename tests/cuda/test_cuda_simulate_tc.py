"""The execution model on tensor-core and cp.async kernels: hand-built kernels that are right
match numpy within the dtype's tolerance, and each kind of fault a GPU would not report is
raised, named and placed."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autotune
from autotune import driver
from autotune.codegen.cuda.simulate import CudaExecutionError, run_kernel
from autotune.codegen.cuda.simulate_warp import BASE_ALIGN
from autotune.ir.expr import Const, cmp
from autotune.ir.stmt import (
    WMMA_SHAPES,
    Allocate,
    Buffer,
    MmaFill,
    MmaLoad,
    MmaStore,
    MmaSync,
    PrimFunc,
    Scope,
    Seq,
    Store,
    Sync,
)
from autotune.ops.dtypes import dtype_info, to_float32, to_storage
from tests.cuda.tc_kernels import (
    T,
    async_pipeline,
    launch_1d,
    random_half,
    replace_stmts,
    wmma_matmul,
)

HALVES = ["float16", "bfloat16"]


def _run(func, launch, args):
    run_kernel(func, func.body, launch, args)
    return args[-1]


# ---------------------------------------------------------------- half buffers

@pytest.mark.parametrize("dtype", HALVES)
def test_half_buffers_arrive_and_leave_in_storage_form_and_stores_round(dtype):
    """x / 3 is inexact: the store into a half buffer rounds it once, to nearest even."""
    n = 64
    x, y = Buffer("x", (n,), dtype), Buffer("y", (n,), dtype)
    tile = Buffer("tile", (n,), dtype, Scope.SHARED)

    def body(bx, tx):
        return Allocate(tile, Seq([Store(tile, (tx,), x[tx] * Const(1 / 3)), Sync(),
                                   Store(y, (tx,), tile[(tx + 1) % n] * Const(3.0))]))
    stmt, launch = launch_1d(body, n)
    xs = random_half(np.random.default_rng(0), n, dtype)
    out = _run(PrimFunc("k", (x, y), stmt), launch, [xs, to_storage(np.full(n, np.nan), dtype)])
    assert out.dtype == xs.dtype  # storage form: float16, or uint16 bits for bfloat16
    third = to_float32(to_storage(to_float32(xs, dtype) * np.float32(1 / 3), dtype), dtype)
    want = to_storage(np.roll(third, -1) * np.float32(3.0), dtype)
    assert np.array_equal(out, want)
    assert not np.array_equal(to_float32(out, dtype), np.roll(to_float32(xs, dtype), -1))


# ---------------------------------------------------------------- wmma

def _wmma_args(func, dtype, seed=0):
    rng = np.random.default_rng(seed)
    A, B, C = func.args
    return [random_half(rng, A.shape, dtype), random_half(rng, B.shape, dtype),
            to_storage(np.full(C.shape, np.nan), dtype)]


def _check_matmul(func, launch, dtype, b_layout="row", k_used=None, seed=0):
    args = _wmma_args(func, dtype, seed)
    a = to_float32(args[0], dtype).astype(np.float64)[:, :k_used]
    b = to_float32(args[1], dtype).astype(np.float64)
    ref = a @ (b if b_layout == "row" else b.T)
    out = to_float32(_run(func, launch, args), dtype)
    info = dtype_info(dtype)
    err = np.max(np.abs(out - ref))
    assert err <= info.atol + info.rtol * np.max(np.abs(ref)), err
    return err


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("shape", [(16, 16, 16), (32, 8, 16), (8, 32, 16)],
                         ids=["16x16x16", "32x8x16", "8x32x16"])
def test_one_warp_wmma_matmul_matches_numpy(shape, dtype):
    _check_matmul(*wmma_matmul(shape, dtype), dtype)


@pytest.mark.parametrize("dtype", HALVES)
def test_wmma_accumulates_over_k_with_a_col_major_b_and_padded_rows(dtype):
    func, launch = wmma_matmul((16, 16, 16), dtype, ksteps=3, b_layout="col", lda=56)
    _check_matmul(func, launch, dtype, "col", k_used=48)


def _raises(kind, func, launch, dtype="float16"):
    with pytest.raises(CudaExecutionError) as info:
        _run(func, launch, _wmma_args(func, dtype))
    assert info.value.kind == kind, info.value
    return info.value


def test_a_warp_collective_op_that_some_lanes_skip_is_divergent():
    e = _raises("divergent_warp", *wmma_matmul(mma_guard=lambda tx: cmp("<", tx, 20)))
    assert (e.buffer, e.warp, e.block, e.thread) == ("fc", 0, (0, 0, 0), (20, 0, 0))
    assert "fill" in e.statement and "20 of its 32 lanes" in str(e)


def test_a_warp_of_fewer_than_32_threads_is_divergent():
    """A 48-thread block: its second warp has 16 threads, none of them can run wmma."""
    e = _raises("divergent_warp", *wmma_matmul(threads=48, mma_guard=lambda tx: cmp(">=", tx, 32)))
    assert e.warp == 1 and "only 16 threads" in str(e)


def test_an_offset_that_differs_across_the_warp_is_nonuniform():
    e = _raises("nonuniform_warp", *wmma_matmul(a_offset_of=lambda tx: (tx // 16) * 16))
    assert e.warp == 0 and e.thread == (0, 0, 0) and e.other_thread == (16, 0, 0)
    assert (e.buffer, e.index) == ("A", 0) and "offset" in str(e) and "A[" in e.statement


def test_ldm_that_is_not_a_multiple_of_16_bytes_is_misaligned():
    _check_matmul(*wmma_matmul(lda=24), "float16", k_used=16)  # 48 bytes: fine
    e = _raises("misaligned", *wmma_matmul(lda=20))            # 40 bytes
    assert e.buffer == "A" and "ldm 20" in str(e) and e.warp == 0


def test_a_pointer_that_is_not_32_byte_aligned_is_misaligned():
    e = _raises("misaligned", *wmma_matmul(lda=24, a_offset=8))  # 16 bytes past A's start
    assert (e.buffer, e.index) == ("A", 8) and "32-byte" in str(e)


def test_a_fragment_used_before_it_is_written_is_uninitialized():
    e = _raises("uninitialized", *wmma_matmul(fill=False))
    assert (e.buffer, e.index, e.warp) == ("fc", 0, 0) and "mma(" in e.statement


def test_a_fragment_load_past_the_buffer_is_out_of_bounds():
    e = _raises("out_of_bounds", *wmma_matmul(a_offset=32))
    assert e.buffer == "A" and e.index == 256 and e.warp == 0


def test_a_fragment_index_past_the_fragment_array_is_out_of_bounds():
    e = _raises("out_of_bounds", *wmma_matmul(acc_index=1))
    assert (e.buffer, e.index, e.warp) == ("fc", 1, 0) and "fill" in e.statement


def test_other_warps_reading_an_mma_store_without_a_barrier_race():
    _check_matmul(*wmma_matmul(threads=64, warp1_copies=True), "float16")  # with the barrier
    e = _raises("race", *wmma_matmul(threads=64, barrier=False, warp1_copies=True))
    assert e.buffer == "c_sh" and e.other_thread == (0, 0, 0)  # warp 0's lane 0 stored
    assert e.thread == (32, 0, 0) and e.warp is None and "c_sh[" in e.statement


def test_an_mma_store_whose_rows_overlap_writes_elements_twice():
    """ldm 8 (16 bytes: aligned) for rows of 16: row r's second half is row r+1's first."""
    func, launch = wmma_matmul()
    bad = replace_stmts(func.body, lambda s: isinstance(s, MmaStore),
                   lambda s: MmaStore(s.dst, s.offset, 8, s.frag, s.index, s.shape))
    e = _raises("race", PrimFunc("wmma", func.args, bad), launch)
    assert (e.buffer, e.index, e.warp) == ("c_sh", 8, 0) and "store" in e.statement


def test_its_own_lanes_also_need_a_barrier_after_an_mma_store():
    e = _raises("race", *wmma_matmul(threads=32, barrier=False))
    assert e.buffer == "c_sh" and e.other_thread == (0, 0, 0) and e.thread != (0, 0, 0)


def test_a_fragment_loaded_from_another_element_type_is_an_invalid_statement():
    """A float* where wmma wants a half*: nvcc would refuse it."""
    func, launch = wmma_matmul()
    A, B, C = func.args
    wrong = Buffer("A", A.shape, "float32")
    swapped = replace_stmts(func.body, lambda s: isinstance(s, MmaLoad) and s.src is A,
                       lambda s: MmaLoad(s.frag, s.index, wrong, s.offset, s.ldm, s.layout,
                                         s.shape))
    func = PrimFunc("wmma", (wrong, B, C), swapped)
    args = [np.zeros(A.shape, np.float32), *_wmma_args(func, "float16")[1:]]
    with pytest.raises(CudaExecutionError) as info:
        _run(func, launch, args)
    assert info.value.kind == "invalid_statement" and info.value.buffer == "A"


# ---------------------------------------------------------------- cp.async

def _pipe_args(func, dtype="float16"):
    x, out = func.args
    return [random_half(np.random.default_rng(1), x.shape, dtype),
            to_storage(np.full(out.shape, np.nan), dtype)]


@pytest.mark.parametrize("dtype", HALVES)
def test_a_double_buffered_cp_async_pipeline_is_right(dtype):
    func, launch = async_pipeline(dtype=dtype)
    args = _pipe_args(func, dtype)
    xs = to_float32(args[0], dtype).reshape(4, T)
    out = to_float32(_run(func, launch, args), dtype).reshape(4, T)
    assert np.array_equal(out, 2 * np.roll(xs, -8, axis=1))


def _pipe_raises(kind, func, launch):
    with pytest.raises(CudaExecutionError) as info:
        _run(func, launch, _pipe_args(func))
    assert info.value.kind == kind, info.value
    return info.value


def test_reading_a_stage_before_the_wait_covers_it_is_async_pending():
    """wait_group 2 leaves the two newest groups in flight: the stage about to be read too."""
    e = _pipe_raises("async_pending", *async_pipeline(wait=2))
    assert e.buffer == "sh" and e.index == 8 and e.thread == (0, 0, 0)
    assert e.other_thread == (1, 0, 0) and "sh[" in e.statement


def test_a_wait_does_not_cover_copies_not_yet_committed():
    e = _pipe_raises("async_pending", *async_pipeline(wait=0, commit=False, stages=2))
    assert e.buffer == "sh"


def test_landed_data_needs_a_barrier_before_other_threads_read_it():
    """The copies were issued a barrier earlier; the data lands at each thread's wait."""
    e = _pipe_raises("race", *async_pipeline(first_sync=False))
    assert e.buffer == "sh" and e.thread == (0, 0, 0) and e.other_thread == (1, 0, 0)
    assert "sh[" in e.statement


def test_a_copy_into_a_stage_others_still_read_races_without_the_trailing_barrier():
    e = _pipe_raises("race", *async_pipeline(last_sync=False))
    assert e.buffer == "sh" and "async_copy" in e.statement


def test_a_copy_whose_address_is_not_aligned_to_its_size_is_misaligned():
    e = _pipe_raises("misaligned", *async_pipeline(dst_skew=4))  # 8 bytes into a 16-byte copy
    assert e.buffer == "sh" and e.index == 4 and e.thread == (0, 0, 0)


def test_invalid_copies_read_nothing_and_zero_fill():
    """The last stage's source is cut short: its copies are marked invalid and read past the
    end of x, which is fine; without ``valid`` the same copies are out of bounds."""
    n_src = 3 * T + 128

    def valid(tx, stage):
        return cmp("<", stage * T + tx * 8, n_src)
    func, launch = async_pipeline(n_src=n_src, valid=valid)
    args = _pipe_args(func)
    xs = np.concatenate([to_float32(args[0], "float16"), np.zeros(T - 128, np.float32)])
    out = to_float32(_run(func, launch, args), "float16").reshape(4, T)
    assert np.array_equal(out, 2 * np.roll(xs.reshape(4, T), -8, axis=1))
    e = _pipe_raises("out_of_bounds", *async_pipeline(n_src=n_src))
    assert e.buffer == "x" and e.index == n_src


# ---------------------------------------------------------------- the model's assumptions

@pytest.mark.parametrize("op, params", [
    ("matmul", dict(M=64, N=72, K=48)),
    ("conv2d", dict(N=1, C=8, H=7, W=7, K=16, R=3, S=3, stride=1, pad=1))])
def test_the_emitter_aligns_shared_arrays_as_the_model_assumes(op, params):
    """The model takes a shared array that wmma or cp.async touches to start
    ``BASE_ALIGN[SHARED]``-byte aligned: the CUDA C must declare it so."""
    wl = autotune.workload(op, dtype="float16", **params)
    src = driver.source(wl, autotune.Target("cuda -arch=sm_80"))
    declared = {m[2]: int(m[1]) for m in re.finditer(r"__shared__ __align__\((\d+)\) \S+ (\w+)\[",
                                                      src)}
    touched = {name for name in declared
               if re.search(rf"(matrix_sync|cvta_generic_to_shared)\([^;]*\b{name}\b", src)}
    assert touched and len(touched) == len(declared)
    assert all(declared[name] >= BASE_ALIGN[Scope.SHARED] for name in touched)


def test_warps_storing_one_output_tile_straight_to_global_memory_race():
    """An output written only by mma_store is tracked like one written by plain stores."""
    shape = (16, 16, 16)
    A, B = Buffer("A", (16, 16), "float16"), Buffer("B", (16, 16), "float16")
    C = Buffer("C", (16, 16), "float32")
    fa = Buffer("fa", (1,), "float16", Scope.WMMA_A)
    fb = Buffer("fb", (1,), "float16", Scope.WMMA_B)
    fc = Buffer("fc", (1,), "float32", Scope.WMMA_ACC)
    z = (Const(0),)

    def body(bx, tx):
        return Allocate(fa, Allocate(fb, Allocate(fc, Seq([
            MmaFill(fc, z, 0.0, shape), MmaLoad(fa, z, A, Const(0), 16, "row", shape),
            MmaLoad(fb, z, B, Const(0), 16, "row", shape), MmaSync(fc, z, fa, z, fb, z, shape),
            MmaStore(C, Const(0), 16, fc, z, shape)]))))
    rng = np.random.default_rng(0)
    for warps in (1, 2):
        stmt, launch = launch_1d(body, 32 * warps)
        func = PrimFunc("k", (A, B, C), stmt)
        args = [random_half(rng, (16, 16), "float16"), random_half(rng, (16, 16), "float16"),
                np.full((16, 16), np.nan, np.float32)]
        if warps == 1:
            out = _run(func, launch, args)
            ref = args[0].astype(np.float64) @ args[1].astype(np.float64)
            assert np.max(np.abs(out - ref)) <= 1e-4 * np.max(np.abs(ref))
            continue
        with pytest.raises(CudaExecutionError) as info:
            _run(func, launch, args)
        e = info.value
        assert (e.kind, e.buffer) == ("race", "C")  # warp 0 and warp 1, lanes 0 and 32
        assert {e.thread, e.other_thread} == {(0, 0, 0), (32, 0, 0)}


@settings(max_examples=25, deadline=None, derandomize=True)
@given(shape=st.sampled_from(WMMA_SHAPES), dtype=st.sampled_from(HALVES),
       ksteps=st.integers(1, 3), b_layout=st.sampled_from(["row", "col"]),
       pad=st.sampled_from([0, 8, 24]), seed=st.integers(0, 2**16))
def test_wmma_matmuls_of_every_shape_layout_and_padding_match_numpy(shape, dtype, ksteps,
                                                                    b_layout, pad, seed):
    k = shape[2] * ksteps
    func, launch = wmma_matmul(shape, dtype, ksteps, b_layout, lda=k + pad)
    _check_matmul(func, launch, dtype, b_layout, k_used=k, seed=seed)
