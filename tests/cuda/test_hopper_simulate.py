"""The execution model on hand-built Hopper kernels (TMA, mbarriers, wgmma, setmaxnreg):
right ones match numpy, and each misuse a GPU would not report is raised as its own kind,
named and placed. Also the layout facts the model rests on, and the emitter's alignment of
the tiles it assumes."""
from __future__ import annotations

import re

import numpy as np
import pytest

import autotune
from autotune import driver
from autotune.codegen.cuda.compiler import prepare_kernel
from autotune.codegen.cuda.passes import dynamic_shared_layout
from autotune.codegen.cuda.simulate import CudaExecutionError, run_kernel
from autotune.codegen.cuda.simulate_layout import box_elements, swizzle
from autotune.codegen.cuda.simulate_mbarrier import Mbarriers
from autotune.ir.expr import FLOAT, Const, Var, cmp
from autotune.ir.stmt import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    MbarrierArrive,
    MbarrierInit,
    PrimFunc,
    Scope,
    Seq,
    SmemMatrix,
    Store,
    TensorMap,
    TmaLoad,
    Wgmma,
)
from autotune.ops.dtypes import MBARRIER
from tests.cuda.hopper_kernels import TARGET, gemm_args, gemm_reference, tma_gemm, ws_gemm
from tests.cuda.tc_kernels import replace_stmts


def _run(func, body, launch, seed=0):
    args = gemm_args(func, seed)
    run_kernel(func, body, launch, args)
    return args[-1], gemm_reference(func, args)


def _raises(kind, *faults, **kw):
    func, body, launch = ws_gemm(faults=frozenset(faults), **kw)
    with pytest.raises(CudaExecutionError) as info:
        _run(func, body, launch)
    assert info.value.kind == kind, info.value
    return info.value


# ---------------------------------------------------------------- right kernels

@pytest.mark.parametrize("kw", [
    dict(),                                                     # 2 k tiles, 2 stages
    dict(K=320, N=128, stages=3, consumers=2),                  # the ring wraps, B shared
    dict(K=192, N=128, b_major="k"),                            # B K-major (its transpose)
    dict(K=64, N=256, dtype="bfloat16"),                        # the widest wgmma
    dict(K=256, stages=1),                                      # one stage, reused each step
    dict(K=320, first_wait=True),                               # parity 1 on fresh barriers
], ids=["2x2", "ring-2-consumers", "b-k-major", "n256-bf16", "one-stage", "first-wait"])
def test_hand_built_warp_specialized_gemms_match_numpy(kw):
    out, ref = _run(*ws_gemm(**kw))
    assert np.max(np.abs(out - ref)) <= 1e-5 * np.max(np.abs(ref))


def test_the_loop_ast_before_the_cuda_passes_runs_the_same():
    func, body, launch = ws_gemm(K=192, prepare=False)
    out, ref = _run(func, body, launch)
    assert np.max(np.abs(out - ref)) <= 1e-5 * np.max(np.abs(ref))


# ---------------------------------------------------------------- mbarriers

def test_a_wait_on_the_wrong_parity_is_caught_at_the_wait():
    e = _raises("wrong_parity", "flip_parity")
    assert e.buffer == "full" and e.index == 0 and e.thread == (128, 0, 0)
    assert "parity 1" in str(e) and "phase 0" in str(e) and "mbarrier_wait" in e.statement


def test_a_consumer_reading_a_stage_it_did_not_wait_for_is_stage_not_ready():
    e = _raises("stage_not_ready", "no_full_wait")
    assert (e.buffer, e.index, e.thread) == ("A_sh", 0, (128, 0, 0))
    assert "phase 0 of full[0]" in str(e) and "wgmma" in e.statement


def test_a_thread_load_of_a_stage_before_its_wait_is_stage_not_ready():
    e = _raises("stage_not_ready", "thread_peeks")
    assert e.buffer == "B_sh" and "B_sh[" in e.statement


def test_a_producer_overwriting_a_stage_it_did_not_wait_to_be_freed_is_stage_in_use():
    assert _run(*ws_gemm(faults=frozenset({"no_empty_wait"})))  # no stage is reused: fine
    e = _raises("stage_in_use", "no_empty_wait", K=256)
    assert (e.buffer, e.index, e.thread) == ("A_sh", 0, (0, 0, 0))
    assert "retired, but no arrival" in str(e) and "tma_load" in e.statement


def test_a_stage_freed_while_its_wgmma_is_in_flight_is_stage_in_use():
    e = _raises("stage_in_use", "wait_one", K=128, stages=1)
    assert e.buffer == "A_sh" and "has not retired" in str(e)


def test_too_few_expected_bytes_are_caught_when_a_copy_lands():
    e = _raises("too_few_expected_bytes", "expect_less")
    assert e.buffer == "full" and "8192 bytes" in str(e) and "tma_load" in e.statement


def test_too_many_expected_bytes_starve_the_barrier():
    e = _raises("too_many_expected_bytes", "expect_more")
    assert "full[0]" in str(e) and "expects 16 bytes" in str(e)


def test_a_kernel_that_ends_with_a_phase_still_expecting_bytes_is_caught():
    """Nobody waits for the copy: the starved phase shows when the kernel ends."""
    src = Buffer("X", (64, 64), "float16")
    out = Buffer("Y", (64,), FLOAT)
    sh = Buffer("X_sh", (64 * 64,), "float16", Scope.SHARED)
    bar = Buffer("bar", (1,), MBARRIER, Scope.SHARED)
    tx, zero = Var("tx"), Const(0)
    body = Allocate(sh, Allocate(bar, Seq([
        IfThenElse(cmp("==", tx, 0), Seq([
            MbarrierInit(bar, zero, 1), MbarrierArrive(bar, zero, 64 * 64 * 2 + 16),
            TmaLoad(sh, zero, TensorMap("tm", src, (64, 64), 128), (zero, zero), bar,
                    zero)])),
        IfThenElse(cmp("<", tx, 64), Store(out, (tx,), Const(0.0, FLOAT)))])))
    func = PrimFunc("k", (src, out), For(Var("bx"), 1, ForKind.BLOCK_X,
                                         For(tx, 128, ForKind.THREAD_X, body)))
    run_body, launch = prepare_kernel(func, TARGET)
    args = [np.zeros((64, 64), np.float16), np.full(64, np.nan, np.float32)]
    with pytest.raises(CudaExecutionError) as info:
        run_kernel(func, run_body, launch, args)
    e = info.value
    assert e.kind == "too_many_expected_bytes" and e.buffer == "bar" and "16 bytes" in str(e)


def test_an_arrival_past_the_count_is_too_many_arrivals():
    e = _raises("too_many_arrivals", "double_arrive")
    assert e.buffer == "full" and e.thread == (0, 0, 0)


def test_a_pipeline_that_never_frees_a_stage_deadlocks_naming_each_waiter():
    assert _run(*ws_gemm(faults=frozenset({"no_free"})))  # 2 k tiles in 2 stages: fine
    e = _raises("deadlock", "no_free", K=256)
    assert "empty[0] for parity 0 (phase 0)" in str(e)   # the producer
    assert "full[0] for parity 1 (phase 1)" in str(e)    # the consumer
    assert "warpgroup 0" in str(e) and "warpgroup 1" in str(e)


def test_an_mbarrier_used_before_its_init_is_uninitialized():
    e = _raises("uninitialized", "no_init")
    assert e.buffer == "full" and "mbarrier_arrive" in e.statement


def test_an_mbarrier_used_in_the_barrier_phase_of_its_init_races():
    e = _raises("race", "no_init_sync")
    assert e.buffer == "full" and e.other_thread == (0, 0, 0)


@pytest.mark.parametrize("kw", [dict(), dict(barrier_after_wait=False, everyone_waits=True)],
                         ids=["barrier-after-wait", "every-thread-waits"])
def test_a_phase_seen_by_one_thread_reaches_others_through_a_block_barrier(kw):
    """Without warp specialisation: what thread 0's wait saw reaches the warpgroup through
    ``__syncthreads()`` (or each thread waits itself); without either, the others have not
    seen the phase that filled the tiles."""
    out, ref = _run(*tma_gemm(**kw))
    assert np.max(np.abs(out - ref)) <= 1e-5 * np.max(np.abs(ref))
    with pytest.raises(CudaExecutionError) as info:
        _run(*tma_gemm(barrier_after_wait=False))
    e = info.value
    assert e.kind == "stage_not_ready" and e.thread == (1, 0, 0) and e.buffer == "A_sh"


def test_try_wait_parity_returns_once_the_phase_of_that_parity_completed():
    """A fresh barrier counts phase -1 as completed: parity 1 returns at once, parity 0
    once phase 0 completes; a phase completes when its arrivals and bytes are in."""
    bar = Buffer("bar", (1,), MBARRIER, Scope.SHARED)
    bars = Mbarriers([bar], blocks=1, lanes=1, threads=1, warpgroups=1,
                     fail=lambda *a: CudaExecutionError("x", str(a)))
    one = np.zeros(1, np.int64)
    bars.init(one, one, 1)

    def ready(parity):
        return bool(bars.wait_ready(one, one, np.array([parity]))[0])
    assert ready(1) and not ready(0)
    bars.arrive(one, one, one, 100)      # the arrival is in, 100 bytes are not
    assert ready(1) and not ready(0)
    bars.complete_tx(one, one, one, 100)
    assert ready(0) and not ready(1) and int(bars.done[0, 0]) == 1


def test_arrivals_past_a_phase_that_needs_no_bytes_count_towards_the_next():
    """Two threads arriving together on a barrier of count 1 complete two phases; on one
    that still waits for bytes the second arrival has no phase to go to."""
    bar = Buffer("bar", (1,), MBARRIER, Scope.SHARED)
    bars = Mbarriers([bar], blocks=1, lanes=2, threads=2, warpgroups=1,
                     fail=lambda kind, *a: CudaExecutionError(kind, str(a)))
    zero, two = np.zeros(2, np.int64), np.arange(2)
    bars.init(zero[:1], zero[:1], 1)
    bars.arrive(two, zero, zero, 0)
    assert int(bars.done[0, 0]) == 2
    with pytest.raises(CudaExecutionError) as info:
        bars.arrive(two, zero, zero, 64)
    assert info.value.kind == "too_many_arrivals"


# ---------------------------------------------------------------- wgmma

def test_a_wgmma_on_registers_stored_after_the_last_fence_is_missing_fence():
    e = _raises("missing_fence", "no_fence")
    assert e.buffer == "acc" and e.warp == 4 and "wgmma" in e.statement


def test_accumulators_read_before_a_wait_covers_their_group_are_wgmma_pending():
    e = _raises("wgmma_pending", "wait_one")
    assert e.buffer == "acc" and e.thread == (128, 0, 0) and "C[" in e.statement


def test_a_wgmma_adding_to_unwritten_registers_is_uninitialized():
    e = _raises("uninitialized", "no_zero")
    assert e.buffer == "acc" and "wgmma" in e.statement


def test_a_descriptor_of_another_swizzle_than_the_copy_is_swizzle_mismatch():
    e = _raises("swizzle_mismatch", "a_unswizzled")
    assert e.buffer == "A_sh" and "128-byte" in str(e) and "0-byte" in str(e)


def test_a_wgmma_operand_that_threads_stored_is_an_invalid_statement():
    e = _raises("invalid_statement", "thread_fills_a")
    assert e.buffer == "A_sh" and "fence.proxy.async" in str(e)


def test_a_warpgroup_collective_statement_some_threads_skip_is_divergent():
    e = _raises("divergent_warp", "warp_skips_wgmma")
    assert e.thread == (224, 0, 0) and "96 of its 128" in str(e)


def test_a_descriptor_that_differs_across_the_warpgroup_is_nonuniform():
    e = _raises("nonuniform_warp", "offset_per_thread")
    assert e.thread == (128, 0, 0) and "thread (129, 0, 0)" in str(e)


def test_a_wgmma_operand_no_copy_filled_is_uninitialized():
    e = _raises("uninitialized", "no_b_copy")
    assert e.buffer == "B_sh" and e.index == 0 and "wgmma" in e.statement


def test_copies_and_descriptors_past_their_buffer_are_out_of_bounds():
    e = _raises("out_of_bounds", "a_past_end")
    assert (e.buffer, e.index) == ("A_sh", 8192) and "tma_load" in e.statement
    e = _raises("out_of_bounds", "b_past_end")
    assert e.buffer == "B_sh" and e.index >= 8192 and "wgmma" in e.statement


def test_misaligned_descriptors_and_copies_are_misaligned():
    e = _raises("misaligned", "desc_misaligned")
    assert e.buffer == "A_sh" and e.index == 64 and "swizzle pattern" in str(e)
    e = _raises("misaligned", "a_misaligned")
    assert e.buffer == "A_sh" and e.index == 8 and "128-byte" in str(e)


def test_setmaxnreg_past_the_register_file_is_register_overflow():
    _run(*ws_gemm(faults=frozenset({"no_dec"})))  # one consumer fits beside the producer
    e = _raises("register_overflow", "no_dec", consumers=2)
    assert "72704 of the 65536" in str(e)


@pytest.mark.parametrize("change, why", [
    (lambda s: Wgmma(s.acc, s.acc_index, SmemMatrix(s.a.buffer, s.a.offset, "k", 64, 16,
                                                    512), s.b, s.n), "128-byte ones only"),
    (lambda s: Wgmma(s.acc, s.acc_index, SmemMatrix(s.a.buffer, s.a.offset, "mn", 128, 16,
                                                    1024), s.b, s.n), "MN-major A"),
    (lambda s: TmaLoad(s.dst, s.dst_offset, TensorMap("tm", s.tmap.buffer, (64, 32), 128),
                       s.coords, s.bar, s.bar_index), "rows of exactly the swizzle"),
], ids=["swizzle-64-descriptor", "mn-major-a", "tma-row-narrower-than-swizzle"])
def test_what_the_model_does_not_run_is_an_invalid_statement(change, why):
    func, body, launch = ws_gemm()
    kind = Wgmma if "major" in why or "128-byte" in why else TmaLoad
    changed = replace_stmts(body, lambda x: isinstance(x, kind), change)
    with pytest.raises(CudaExecutionError) as info:
        _run(func, changed, launch)
    assert info.value.kind == "invalid_statement" and why in str(info.value)


# ---------------------------------------------------------------- layout facts

def test_the_128_byte_swizzle_xors_chunk_bits_with_row_bits():
    """Byte 16 * c of row r of a 1024-byte pattern lands in chunk c ^ (r % 8)."""
    r, c = np.meshgrid(np.arange(16), np.arange(8), indexing="ij")
    addr = 2048 + r * 128 + c * 16 + 3
    assert np.array_equal(swizzle(addr, 128), 2048 + r * 128 + (c ^ (r % 8)) * 16 + 3)
    assert np.array_equal(swizzle(np.arange(4096), 0), np.arange(4096))
    block = swizzle(np.arange(1024), 128)
    assert sorted(block.tolist()) == list(range(1024))   # a permutation of its pattern


def test_a_box_partly_outside_its_tensor_reads_zeros_there():
    flat, inside = box_elements((3, 5), (2, 4), np.array([[2, 3], [-1, 0]]))
    assert inside.reshape(2, 2, 4)[0].tolist() == [[True, True, False, False]] + [[False] * 4]
    assert flat.reshape(2, 2, 4)[0, 0, :2].tolist() == [13, 14]
    assert inside.reshape(2, 2, 4)[1].tolist() == [[False] * 4, [True] * 4]


def test_the_emitter_aligns_the_tiles_as_the_model_assumes():
    """The model places TMA tiles at their `dynamic_shared_layout` offsets on a 1024-byte
    aligned base: the CUDA C must align the block and put the tiles there."""
    wl = autotune.workload("matmul", M=256, N=256, K=128, dtype="float16")
    func = driver.lower(wl, TARGET)
    src = driver.source(wl, TARGET)
    assert re.search(r"\+ 1023\) & ~1023ull\)", src)
    offsets, _ = dynamic_shared_layout(func.body)
    for b, off in offsets.items():
        if b.name in ("A_shared", "B_shared"):
            assert off % 1024 == 0
            assert re.search(rf"{b.name} = reinterpret_cast<[^>]+>\(at_shared \+ {off}\)", src)
