"""Loop-AST features: fixed length, determinism, meaning of the documented slots, the cache."""
import numpy as np
import pytest

import autotune
from autotune.costmodel.cache import FeatureCache, features_for, invalid_rows
from autotune.costmodel.features import (
    B_BUFFERS,
    CURVE_SLICE,
    N_AST,
    N_CURVE,
    N_LEVEL,
    extract,
    extract_curve,
    extract_many,
    feature_names,
    knob_features,
)
from autotune.driver import config_space
from autotune.target import Target
from tests.costmodel.cm_helpers import hand_matmul

TARGET = Target("llvm -mcpu=skylake-avx512 -cores=2")
WORKLOADS = {
    "matmul": [dict(M=64, N=64, K=64), dict(M=96, N=160, K=128)],
    "conv2d": [dict(N=1, C=16, H=14, W=14, K=32, R=3, S=3, stride=1, pad=1),
               dict(N=1, C=8, H=9, W=11, K=8, R=1, S=1, stride=2, pad=0)],
    "depthwise_conv2d": [dict(N=1, C=16, H=28, W=28, R=3, S=3, stride=1, pad=1)],
}
NAMES = feature_names()


def col(name: str) -> int:
    return NAMES.index(name)


@pytest.mark.parametrize("op", sorted(WORKLOADS))
def test_fixed_length_across_configs_and_workloads_of_an_op(op):
    for params in WORKLOADS[op]:
        wl = autotune.workload(op, **params)
        configs = config_space(wl, TARGET).sample(np.random.default_rng(1), 12)
        X = features_for(wl, TARGET, configs, "ast")
        assert X.shape == (12, N_AST) and X.dtype == np.float32
        valid = X[~invalid_rows(X)]
        assert len(valid) >= 6
        assert np.isfinite(valid[:, CURVE_SLICE][:, :B_BUFFERS * 17]).all()  # strides may be NaN
        assert len({row.tobytes() for row in valid}) > len(valid) // 2  # configs differ
        assert features_for(wl, TARGET, configs, "curve").shape == (12, N_CURVE)


def test_same_config_twice_and_identical_asts_give_equal_features():
    wl = autotune.workload("matmul", M=64, N=64, K=64)
    cfg = config_space(wl, TARGET).sample(np.random.default_rng(3), 1)[0]
    a = extract(autotune.lower(wl, TARGET, cfg))
    b = extract(autotune.lower(wl, TARGET, cfg))
    assert np.array_equal(a, b, equal_nan=True)
    f1, f2 = hand_matmul(64, 64, 64, 4, 16, 8), hand_matmul(64, 64, 64, 4, 16, 8)
    assert f1 is not f2 and np.array_equal(extract(f1), extract(f2), equal_nan=True)
    assert not np.array_equal(extract(f1), extract(hand_matmul(64, 64, 64, 8, 16, 8)))
    assert np.array_equal(extract_many([f1, f2]), np.stack([extract(f1)] * 2))


def test_documented_slots_of_a_hand_built_matmul():
    # update store: for i.o(par 16) j.o(4) k.o(8) k.i(8) i.i(unroll 4) j.i(vec 16)
    x = extract(hand_matmul(64, 64, 64, ti=4, tj=16, tk=8))
    lg = lambda v: np.log2(1 + v)
    assert x[col("s0.l0.extent")] == pytest.approx(lg(16))
    assert x[col("s0.l0.kind_vectorized")] == 1 and x[col("s0.l1.kind_unrolled")] == 1
    assert x[col("s0.l5.kind_parallel")] == 1 and x[col("s0.l5.depth")] == 0
    assert x[col("s0.l0.outer")] == pytest.approx(lg(16 * 4 * 8 * 8 * 4))
    assert x[col("s0.l2.inner")] == pytest.approx(lg(8 * 4 * 16))
    assert x[col("s0.is_reduction")] == 1 and x[col("s0.scope_local")] == 1
    assert x[col("s0.trip")] == pytest.approx(lg(64 ** 3))
    assert x[col("s0.fmas")] == pytest.approx(lg(64 ** 3))
    # buffers: C_local (stored) first, then A and B (one load each: by name)
    assert x[col("s0.l0.b0.stride")] == pytest.approx(lg(1))     # C_local[ii, ji]
    assert x[col("s0.l0.b1.stride")] == 0                        # A does not move with ji
    assert x[col("s0.l0.b2.stride")] == pytest.approx(lg(1))     # B[k, j]: unit stride
    assert x[col("s0.l2.b2.stride")] == pytest.approx(lg(64))    # k.i walks B's rows
    assert x[col("s0.l1.b1.foot")] == pytest.approx(lg(4))       # A: 4 rows, one k
    assert x[col("s0.l2.b2.foot")] == pytest.approx(lg(8 * 16))  # B: 8 x 16 tile
    assert x[col("s0.l2.b2.reuse")] == pytest.approx(lg(4))      # each B element used 4x
    assert x[col("s0.l0.b2.bytes")] == pytest.approx(lg(64))     # 16 floats: one line
    assert x[col("g.local_bytes")] == pytest.approx(lg(4 * 16 * 4))
    assert x[col("c.vectorized")] == pytest.approx(lg(16))
    assert x[col("c.parallel")] == pytest.approx(lg(16))
    assert x[col("c.flop_share")] == pytest.approx(1.0)
    assert len(NAMES) == N_AST and N_LEVEL == 12 + 5 * B_BUFFERS


def test_non_affine_index_gives_a_missing_stride():
    x = extract(hand_matmul(64, 64, 64, ti=4, tj=16, tk=8, fuse=True))
    # the write-back C[(f // 4) * 4 + ii, (f % 4) * 16 + ji] under the fused parallel loop
    assert np.isnan(x).any()
    assert np.isfinite(x[CURVE_SLICE][:B_BUFFERS * 17]).all()


def test_curve_block_is_the_tail_of_the_ast_row():
    f = hand_matmul(64, 64, 64, 4, 16, 8)
    assert np.array_equal(extract_curve(f), extract(f)[CURVE_SLICE])
    assert len(feature_names("curve")) == N_CURVE


def test_cache_reuses_rows_and_marks_invalid_configs():
    wl = autotune.workload("matmul", M=64, N=64, K=64)
    sp = config_space(wl, TARGET)
    configs = sp.sample(np.random.default_rng(0), 6)
    calls = []

    def lower(w, t, c):
        calls.append(c.index)
        if c.index == configs[0].index:
            from autotune.driver import InvalidConfig
            raise InvalidConfig("test")
        return autotune.lower(w, t, c)

    cache = FeatureCache(maxsize=4)
    X = features_for(wl, TARGET, configs, cache=cache, lower=lower)
    assert invalid_rows(X).tolist() == [True] + [False] * 5
    assert len(cache) == 4 and cache.stats["misses"] == 6
    again = features_for(wl, TARGET, configs[-4:], cache=cache, lower=lower)
    assert (np.array_equal(again, X[-4:], equal_nan=True) and len(calls) == 6
            and cache.stats["hits"] == 4)
    with pytest.raises(ValueError, match="holds rows"):
        features_for(autotune.workload("matmul", M=32, N=64, K=64), TARGET, configs[:1],
                     cache=cache)


def test_knob_features_are_scaled_positions_and_log_factors():
    wl = autotune.workload("matmul", M=64, N=64, K=64)
    sp = config_space(wl, TARGET)
    configs = sp.sample(np.random.default_rng(0), 20)
    K = knob_features(sp, configs)
    assert K.shape[0] == 20 and K.shape[1] > len(sp.dims)
    assert K[:, :len(sp.dims)].min() >= 0 and K[:, :len(sp.dims)].max() <= 1
    assert np.array_equal(K, features_for(wl, TARGET, configs, "knob"))
    with pytest.raises(ValueError, match="kind"):
        features_for(wl, TARGET, configs, "bogus")


def test_gpu_copies_rebound_to_the_block_threads_do_not_outweigh_the_compute():
    wl = autotune.workload("matmul", M=256, N=256, K=256)
    target = Target("cuda -arch=sm_90")
    configs = [c for c in config_space(wl, target).sample(np.random.default_rng(0), 40)
               if config_space(wl, target).is_valid(c)][:6]
    X = features_for(wl, target, configs, "ast")
    X = X[~invalid_rows(X)]
    assert len(X) >= 3
    assert (X[:, col("s0.is_reduction")] == 1).all() and (X[:, col("c.flop_share")] == 1).all()
    assert (X[:, col("c.threadIdx")] <= np.log2(1 + 1024)).all()  # threads of one block
    assert np.allclose(X[:, col("s0.trip")], np.log2(1 + 256 ** 3))


# ---------------------------------------------------------------- tensor cores

def test_tensor_core_statements_count_mma_flops_and_fragment_bytes():
    from tests.cuda.tc_kernels import wmma_matmul
    lg = lambda v: np.log2(1 + v)
    one, _ = wmma_matmul((16, 16, 16), ksteps=1)
    three, _ = wmma_matmul((16, 16, 16), ksteps=3)
    x1, x3 = extract(one), extract(three)
    # one warp: 2*m*n*k flops per mma_sync, not per thread
    assert x1[col("tc.mma_flops")] == pytest.approx(lg(2 * 16 ** 3))
    assert x3[col("tc.mma_flops")] == pytest.approx(lg(3 * 2 * 16 ** 3))
    assert x3[col("tc.mma")] == pytest.approx(lg(3))
    # each step loads an A and a B fragment of 16x16 halves from global memory
    assert x3[col("tc.frag_load_global")] == pytest.approx(lg(3 * 2 * 256 * 2))
    assert x3[col("tc.frag_load_shared")] == 0
    assert x3[col("tc.frag_store_shared")] == pytest.approx(lg(256 * 4))
    assert x3[col("tc.bank_aligned")] == 0  # the 16-float rows of c_sh are 64 bytes apart
    assert x3[col("tc.mma_share")] == 1.0  # the copy-out does no arithmetic
    assert x3[col("tc.acc_frag_bytes")] == pytest.approx(lg(256 * 4 / 32))
    assert x3[col("tc.ab_frag_bytes")] == pytest.approx(lg(2 * 256 * 2 / 32))
    # A 16x48, B 48x16, C 16x16, all float16
    assert x3[col("tc.half_arg_bytes")] == pytest.approx(lg((2 * 16 * 48 + 256) * 2))
    assert x3[col("tc.float_arg_bytes")] == 0
    assert x3[col("g.shared_bytes")] == pytest.approx(lg(256 * 4))
    # the block is part of the curve, which transfer across workloads reads
    assert not np.array_equal(x1[CURVE_SLICE], x3[CURVE_SLICE])
    assert x1[col("tc.mma_flops")] < x3[col("tc.mma_flops")]


def test_cp_async_pipelines_count_copy_bytes_groups_waits_and_barriers():
    from tests.cuda.tc_kernels import T, async_pipeline
    lg = lambda v: np.log2(1 + v)
    x = extract(async_pipeline(stages=4)[0])
    # a prologue copy and one per stage (guarded: counted), 32 threads x 16 bytes each
    assert x[col("tc.async_bytes")] == pytest.approx(lg(5 * 32 * 16))
    assert x[col("tc.async_width")] == 16
    assert x[col("tc.commits")] == pytest.approx(lg(5))
    assert x[col("tc.waits")] == pytest.approx(lg(4))
    assert x[col("tc.syncs")] == pytest.approx(lg(1 + 2 * 4))
    assert x[col("tc.in_flight")] == 2  # wait_group 1, plus one
    assert x[col("tc.half_arg_bytes")] == pytest.approx(lg(2 * 4 * T * 2))
    assert x[col("tc.mma_flops")] == 0
    deeper = extract(async_pipeline(stages=4, wait=2)[0])
    assert deeper[col("tc.in_flight")] == 3


def test_float32_kernels_have_an_empty_tensor_core_block():
    x = extract(hand_matmul(64, 64, 64, 4, 16, 8))
    tc = [i for i, n in enumerate(NAMES) if n.startswith("tc.")]
    assert len(tc) == 32
    assert x[col("tc.float_arg_bytes")] == pytest.approx(np.log2(1 + 3 * 64 * 64 * 4))
    assert not np.any(np.delete(x[tc], tc.index(col("tc.float_arg_bytes"))))


def test_tensor_core_template_configs_show_their_mma_work_and_shared_layout():
    t = Target("cuda -arch=sm_80")
    wl = autotune.workload("matmul", M=128, N=128, K=128, dtype="float16")
    sp = config_space(wl, t)
    rows = {}
    for pad in (0, 8):
        # a 64 x 128 block tile: B's rows are 128 halves, the staging tile's 128 floats
        cfg = sp.config(dict(sp.default()) | dict(mma_shape="16x16x16", warps_m=2, warps_n=4,
                                                  frags_m=2, frags_n=2, pad=pad))
        assert sp.invalid_reason(cfg) is None
        rows[pad] = extract(autotune.lower(wl, t, cfg))
    for x in rows.values():
        assert x[col("tc.mma_flops")] == pytest.approx(np.log2(1 + 2 * 128 ** 3))
        assert x[col("tc.mma_share")] == 1.0 and x[col("tc.async_width")] == 16
    # unpadded, every row of B and of the staging tile starts in the same bank
    assert rows[0][col("tc.bank_aligned")] > 0 and rows[8][col("tc.bank_aligned")] == 0


def test_split_k_shows_its_workspace_traffic_and_atomics():
    """Split-K's partial tiles (S x tiles x BM x BN floats) and one arrival per block; none
    without a split, with the same MMA work either way."""
    t = Target("cuda -arch=sm_90")
    wl = autotune.workload("matmul", M=64, N=64, K=512, dtype="float16")
    sp = config_space(wl, t)
    base = dict(sp.default()) | dict(warps_m=2, warps_n=2, frags_m=1, frags_n=1)  # 32 x 32
    rows = {}
    for split in (1, 4):
        cfg = sp.config(base | dict(split_k=split))
        assert sp.invalid_reason(cfg) is None
        rows[split] = extract(autotune.lower(wl, t, cfg))
    assert rows[1][col("tc.workspace_bytes")] == 0 and rows[1][col("tc.atomics")] == 0
    assert rows[4][col("tc.workspace_bytes")] == pytest.approx(np.log2(1 + 4 * 4 * 32 * 32 * 4))
    assert rows[4][col("tc.atomics")] == pytest.approx(np.log2(1 + 4 * 4))
    assert rows[4][col("tc.mma_flops")] == rows[1][col("tc.mma_flops")]


# ---------------------------------------------------------------- Hopper (wgmma)

def test_wgmma_kernels_count_tma_bytes_wgmma_flops_stages_waits_and_consumers():
    """The hand-built warp-specialized GEMM (64 x 64 x 128, two k tiles, two stages): only
    thread 0 copies, only the consumer warpgroup multiplies, whatever the thread loop."""
    from tests.cuda.hopper_kernels import ws_gemm
    lg = lambda v: np.log2(1 + v)
    x = extract(ws_gemm(K=128, N=64)[0])
    assert x[col("tc.tma_bytes")] == pytest.approx(lg(2 * 2 * 64 * 64 * 2))  # A and B tiles
    assert x[col("tc.tma_box_bytes")] == pytest.approx(lg(64 * 64 * 2))
    assert x[col("tc.wgmma_flops")] == pytest.approx(lg(2 * 64 * 64 * 128))  # 2MNK, once
    assert x[col("tc.mma_flops")] == x[col("tc.wgmma_flops")]
    assert x[col("tc.tma_intensity")] == pytest.approx(lg(2 * 64 * 64 * 128 / 32768))
    assert x[col("tc.wgmma_n")] == pytest.approx(lg(64))
    assert x[col("tc.barrier_slots")] == 4                 # full and empty per stage
    assert x[col("tc.mbar_waits")] == pytest.approx(lg(2 + 2))   # producer and consumer
    assert x[col("tc.mbar_arrives")] == pytest.approx(lg(2 + 2))
    assert x[col("tc.wgmma_in_flight")] == 1 and x[col("tc.consumers")] == 1
    assert x[col("tc.max_nreg")] == pytest.approx(lg(240))
    assert x[col("tc.mma")] == 0 and x[col("tc.async_bytes")] == 0  # no wmma, no cp.async
    y = extract(ws_gemm(K=256, N=128, stages=4, consumers=2,
                        faults=frozenset({"wait_one"}))[0])
    assert y[col("tc.wgmma_flops")] == pytest.approx(lg(2 * 128 * 128 * 256))
    assert y[col("tc.barrier_slots")] == 8 and y[col("tc.consumers")] == 2
    assert y[col("tc.wgmma_in_flight")] == 2 and y[col("tc.max_nreg")] == pytest.approx(lg(232))
    # the block is part of the curve, which transfer across workloads reads
    assert not np.array_equal(x[CURVE_SLICE], y[CURVE_SLICE])


def test_wgmma_template_knobs_show_in_the_tensor_core_block():
    t = Target("cuda -arch=sm_90a")
    wl = autotune.workload("matmul", M=256, N=256, K=128, dtype="float16")
    sp = config_space(wl, t)
    rows = {}
    for knobs in (dict(consumers=1, m_tiles=1, block_n=64, stages=2, inflight=0),
                  dict(consumers=2, m_tiles=1, block_n=128, stages=4, inflight=1)):
        cfg = sp.config(dict(sp.default()) | knobs)
        assert sp.invalid_reason(cfg) is None
        rows[knobs["consumers"]] = x = extract(autotune.lower(wl, t, cfg))
        # 16 or 4 tiles, each on a block of its own: every flop of the GEMM, once
        assert x[col("tc.wgmma_flops")] == pytest.approx(np.log2(1 + 2 * 256 * 256 * 128))
        assert x[col("tc.barrier_slots")] == 2 * knobs["stages"]
        assert x[col("tc.consumers")] == knobs["consumers"]
        assert x[col("tc.wgmma_in_flight")] == 1 + knobs["inflight"]
        assert x[col("tc.wgmma_n")] == pytest.approx(np.log2(1 + knobs["block_n"]))
    one, two = rows[1], rows[2]
    # bigger tiles read each operand fewer times: fewer TMA bytes for the same flops
    assert two[col("tc.tma_bytes")] < one[col("tc.tma_bytes")]
    assert two[col("tc.tma_intensity")] > one[col("tc.tma_intensity")]
    assert two[col("tc.max_nreg")] < one[col("tc.max_nreg")]  # two consumers share the file
    # the wmma kernel of the same GEMM on sm_90 has an empty Hopper part, and vice versa
    wmma = extract(autotune.lower(wl, Target("cuda -arch=sm_90")))
    hopper = [col(f"tc.{n}") for n in ("tma_bytes", "wgmma_flops", "barrier_slots",
                                        "mbar_waits", "consumers", "max_nreg")]
    assert not np.any(wmma[hopper]) and wmma[col("tc.mma")] > 0 and one[col("tc.mma")] == 0
