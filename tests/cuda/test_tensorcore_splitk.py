"""Split-K on the tensor-core template: the kernels run in the CUDA execution model, blocks
in orders where the last to arrive at a tile's counter is not the highest, launch after
launch on the same workspaces, and match the reference; the protocol's steps (the fences,
the barrier between them and the atomic, the counter's reset) each matter: without one the
model reports the race or the counter left behind. Defaults split the late ResNet convs."""
from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import autotune
from autotune import driver
from autotune.codegen.cuda.compiler import prepare_kernel
from autotune.codegen.cuda.simulate import CudaExecutionError, run_kernel
from autotune.ir.expr import Const
from autotune.ir.stmt import (
    Allocate,
    AtomicAdd,
    Fence,
    For,
    IfThenElse,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    Sync,
    walk_stmts,
)
from autotune.ops.dtypes import dtype_info
from autotune.schedule.templates import cuda_tensorcore as tc
from tests.cuda.tensorcore_cases import DTYPES, OPS, target, workloads

# small tiles (32 x 32, 4 warps) and k steps, so that each split has k tiles to run
SMALL = dict(mma_shape="16x16x16", warps_m=2, warps_n=2, frags_m=1, frags_n=1, block_k=16)


def split_config(wl, split: int, arch: str = "sm_80", **change):
    sp = driver.config_space(wl, target(arch))
    cfg = sp.config(dict(sp.default()) | SMALL | dict(split_k=split) | change)
    assert sp.invalid_reason(cfg) is None, sp.invalid_reason(cfg)
    return cfg


def long_k(op: str, dtype: str = "float16", **epilogue):
    """A small output and a long reduction, with tails in M, N and K."""
    if op == "conv2d":
        return autotune.workload("conv2d", N=2, C=24, H=5, W=6, K=20, R=3, S=3, stride=1, pad=1,
                                 dtype=dtype, **epilogue)
    if op == "batch_matmul":
        return autotune.workload("batch_matmul", B=2, M=24, N=40, K=150, dtype=dtype, **epilogue)
    return autotune.workload("matmul", M=40, N=48, K=200, dtype=dtype, **epilogue)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_split_kernels_match_the_reference_in_any_block_order(op, dtype):
    wl = long_k(op, dtype, epilogue=("scale_shift", "residual", "relu") if op == "conv2d"
                else ("bias", "relu"))
    for i, split in enumerate((2, 4)):
        cfg = split_config(wl, split, stages=3 if i else 2)
        err = autotune.simulate_cuda(wl, cfg, target(), seed=i, block_seed=i, launches=2)
        assert err <= dtype_info(dtype).rtol, f"{wl} split {split}: error {err:.3g}"


@pytest.mark.parametrize("op", OPS)
def test_sampled_split_configs_of_the_shared_cases(op):
    """The tensor-core cases' shapes, with a valid split drawn per config."""
    rng = np.random.default_rng(3)
    for i, wl in enumerate(workloads(op, "bfloat16")):
        sp = driver.config_space(wl, target())
        drawn = [c for c in sp.sample(rng, 200) if c["split_k"] > 1 and sp.is_valid(c)][:2]
        for cfg in drawn:
            err = autotune.simulate_cuda(wl, cfg, target(), seed=i, block_seed=7)
            assert err <= dtype_info("bfloat16").rtol, f"{wl} {dict(cfg)}: {err:.3g}"


def _run(wl, func: PrimFunc, order=None, launches: int = 1, seed: int = 0) -> np.ndarray:
    body, launch = prepare_kernel(func, target())
    scratch = [np.zeros(w.size, np.float32) for w in func.workspaces]
    args = wl.random_args(seed)
    unset = args[-1].copy()
    for _ in range(launches):
        args[-1][...] = unset
        run_kernel(func, body, launch, args, block_order=order, scratch=scratch)
    return args[-1]


def test_the_sum_is_the_same_whichever_block_arrives_last():
    """Reversed, the lowest split of each tile arrives last; shuffled, any; the output is
    bit for bit the one of index order (the partials are summed in split order)."""
    wl = long_k("matmul", "float16", epilogue=("bias",))
    func = driver.lower(wl, target(), split_config(wl, 4))
    blocks = int(np.prod(prepare_kernel(func, target())[1].grid))
    ref = wl.reference(wl.random_args(0)[:-1])
    first = _run(wl, func)
    assert np.max(np.abs(first.astype(np.float64) - ref)) <= dtype_info("float16").rtol * \
        np.max(np.abs(ref))
    for order in (np.arange(blocks)[::-1], np.random.default_rng(5).permutation(blocks)):
        assert np.array_equal(_run(wl, func, order, launches=2), first)


def _rewrite(s: Stmt, fn: Callable[[Stmt], Stmt | None]) -> Stmt:
    """``s`` with ``fn`` applied bottom-up to every statement (None drops it from its
    sequence)."""
    if isinstance(s, Seq):
        kept = [x for x in (_rewrite(c, fn) for c in s.stmts) if x is not None]
        s = Seq(kept)
    elif isinstance(s, For):
        s = For(s.var, s.extent, s.kind, _rewrite(s.body, fn))
    elif isinstance(s, Allocate):
        s = Allocate(s.buffer, _rewrite(s.body, fn))
    elif isinstance(s, IfThenElse):
        s = IfThenElse(s.cond, _rewrite(s.then, fn),
                       None if s.else_ is None else _rewrite(s.else_, fn))
    out = fn(s)
    return Seq([]) if out is None else out


def _mutated(wl, mutate: Callable[[Stmt], Stmt], split: int = 4) -> PrimFunc:
    f = driver.lower(wl, target(), split_config(wl, split))
    return PrimFunc(f.name, f.args, mutate(f.body), f.workspaces)


def _drop_writer_fence(body: Stmt) -> Stmt:
    """The fence every thread runs after storing its partials (not the one after the
    atomic, in thread 0's branch)."""
    def fn(s: Stmt) -> Stmt:
        if isinstance(s, Seq) and any(isinstance(c, Sync) for c in s.stmts):
            return Seq([c for c in s.stmts if not isinstance(c, Fence)])
        return s
    return _rewrite(body, fn)


def _drop_reader_fence(body: Stmt) -> Stmt:
    def fn(s: Stmt) -> Stmt:
        if isinstance(s, IfThenElse) and any(isinstance(x, AtomicAdd) for x in walk_stmts(s)):
            return IfThenElse(s.cond, Seq([x for x in walk_stmts(s.then)
                                           if isinstance(x, AtomicAdd)]))
        return s
    return _rewrite(body, fn)


def _drop_barrier_before_the_atomic(body: Stmt) -> Stmt:
    def fn(s: Stmt) -> Stmt:
        if not isinstance(s, Seq):
            return s
        stmts = list(s.stmts)
        for k in range(1, len(stmts) - 1):
            if isinstance(stmts[k - 1], Fence) and isinstance(stmts[k], Sync):
                return Seq(stmts[:k] + stmts[k + 1:])
        return s
    return _rewrite(body, fn)


def _drop_reset(body: Stmt) -> Stmt:
    def fn(s: Stmt) -> Stmt | None:
        resets = isinstance(s, IfThenElse) and isinstance(s.then, Store) and \
            s.then.buffer.name == "split_counters"
        return None if resets else s
    return _rewrite(body, fn)


@pytest.mark.parametrize("mutate, kind", [
    (_drop_writer_fence, "race"),
    (_drop_reader_fence, "race"),
    (_drop_barrier_before_the_atomic, "race"),
    (_drop_reset, "counter_not_reset"),
])
def test_a_broken_protocol_is_caught(mutate, kind):
    wl = long_k("matmul", "float16")
    func = _mutated(wl, mutate)
    assert len(list(walk_stmts(func.body))) < len(list(walk_stmts(
        driver.lower(wl, target(), split_config(wl, 4)).body)))  # something was dropped
    with pytest.raises(CudaExecutionError) as info:
        _run(wl, func, np.random.default_rng(1).permutation(
            int(np.prod(prepare_kernel(func, target())[1].grid))))
    assert info.value.kind == kind, info.value
    if kind == "race":
        assert info.value.buffer == "split_partials"


def test_a_counter_reset_on_arrival_is_caught():
    """Every block zeroing its counter right after counting (so that no block would see
    S - 1): plain stores of two blocks to one counter."""
    wl = long_k("matmul", "float16")
    f = driver.lower(wl, target(), split_config(wl, 4))
    func = PrimFunc(f.name, f.args, _rewrite(f.body, _reset_on_arrival), f.workspaces)
    with pytest.raises(CudaExecutionError) as info:
        _run(wl, func)
    assert (info.value.kind, info.value.buffer) == ("race", "split_counters")


def _reset_on_arrival(s: Stmt) -> Stmt:
    if isinstance(s, IfThenElse) and isinstance(s.then, Seq) and any(
            isinstance(x, AtomicAdd) for x in s.then.stmts):
        atomic = next(x for x in s.then.stmts if isinstance(x, AtomicAdd))
        return IfThenElse(s.cond, Seq([*s.then.stmts,
                                       Store(atomic.buffer, atomic.index, Const(0.0))]))
    return s


def test_split_1_is_the_plain_kernel():
    wl = long_k("matmul")
    func = driver.lower(wl, target(), split_config(wl, 1))
    assert func.workspaces == ()
    assert not any(isinstance(s, (Fence, AtomicAdd)) for s in walk_stmts(func.body))
    split = driver.lower(wl, target(), split_config(wl, 4))
    t = tc.tiling(split_config(wl, 4))
    assert [w.size for w in split.workspaces] == [4 * 2 * 2 * 32 * 32, 2 * 2]
    assert tc.workspace_bytes(t, wl) == 4 * split.workspaces[0].size


def test_validity_rejects_a_split_with_no_k_tile_and_huge_workspaces():
    wl = autotune.workload("matmul", M=64, N=64, K=80, dtype="float16")  # 5 tiles of 16
    sp = driver.config_space(wl, target())
    base = dict(sp.default()) | SMALL
    assert sp.invalid_reason(sp.config(base | dict(split_k=4))) is not None  # 2,2,1,0
    assert "no k tile" in sp.invalid_reason(sp.config(base | dict(split_k=4)))
    assert sp.invalid_reason(sp.config(base | dict(split_k=2))) is None       # 3, 2
    big = autotune.workload("matmul", M=4096, N=4096, K=4096, dtype="float16")
    sp = driver.config_space(big, target())
    reason = sp.invalid_reason(sp.config(dict(sp.default()) | dict(split_k=2)))
    assert reason is not None and "workspace" in reason


@pytest.mark.parametrize("shape, split", [
    (dict(C=512, H=7, W=7, K=512), 8),      # K = 4608
    (dict(C=256, H=14, W=14, K=256), 4),    # K = 2304
])
def test_defaults_split_the_late_resnet_convs(shape, split):
    """The tiles alone leave SMs idle: split until every SM has a block, at least
    MIN_SPLIT_TILES k tiles each."""
    wl = autotune.workload("conv2d", N=1, R=3, S=3, stride=1, pad=1, dtype="float16", **shape)
    tgt = target("sm_90")
    sp = driver.config_space(wl, tgt)
    cfg = sp.default()
    assert sp.invalid_reason(cfg) is None and cfg["split_k"] == split
    t = tc.tiling(cfg)
    batch, M, N, K = tc.gemm_dims(wl)
    tiles = batch * -(-M // t.bm) * -(-N // t.bn)
    assert tiles < tgt.cuda.multiprocessors <= tiles * split
    assert tc.k_tiles(t, K)[1] >= tc.MIN_SPLIT_TILES
    assert autotune.lower(wl, tgt, cfg).workspaces
    wl = autotune.workload("conv2d", N=1, R=3, S=3, stride=1, pad=1, dtype="float16",
                           epilogue=("bias", "relu"), **shape)
    assert autotune.simulate_cuda(wl, cfg, tgt, block_seed=3) <= dtype_info("float16").rtol


def test_defaults_do_not_split_a_grid_that_fills_the_gpu():
    for wl in (autotune.workload("matmul", M=1024, N=1024, K=1024, dtype="float16"),
               autotune.workload("conv2d", N=1, C=64, H=56, W=56, K=64, R=3, S=3, stride=1,
                                 pad=1, dtype="float16"),
               autotune.workload("matmul", M=16, N=16, K=64, dtype="float16")):  # K short
        assert driver.config_space(wl, target("sm_90")).default()["split_k"] == 1, wl


def test_recorded_pools_replay_the_configs_they_recorded():
    """split_k is the first knob, 1 first: the float16 matmul pool, recorded before it
    existed, names by index the configs its knobs describe, with no split."""
    import gzip
    import json
    from pathlib import Path

    path = Path(__file__).parents[2] / "benchmarks" / "data" / "matmul_fp16.jsonl.gz"
    with gzip.open(path, "rt") as fp:
        records = [json.loads(line) for line, _ in zip(fp, range(40))]
    sp = None
    for rec in records:
        if sp is None:
            wl = autotune.workload(rec["workload"]["op"], dtype=rec["workload"]["dtype"],
                                   **rec["workload"]["params"])
            sp = driver.config_space(wl, autotune.Target(rec["target"]))
        cfg = sp.get(rec["config"]["index"])
        assert dict(cfg) == {"split_k": 1, **rec["config"]["knobs"]}
