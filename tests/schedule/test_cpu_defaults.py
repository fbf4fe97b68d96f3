"""CPU templates' defaults: derived from `CpuFacts`, points of their spaces, compiled for
AVX2 and AVX-512 targets (cross-compiled), run against numpy on the host."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import autotune
from autotune import driver
from autotune.schedule.templates import cpu_conv2d, cpu_depthwise, cpu_matmul
from autotune.target.cpu_facts import CpuFacts, facts_of, has_fma, parse_size

AVX2 = CpuFacts(256, 16, True, 32 * 1024, 256 * 1024, 8 * 1024**2, 4)
AVX512 = CpuFacts(512, 32, True, 32 * 1024, 1024 * 1024, 16 * 1024**2, 4)
EPILOGUES = [(), ("bias", "relu"), ("scale_shift",)]
WORKLOADS = {
    "matmul": dict(M=96, N=64, K=48),
    "batch_matmul": dict(B=2, M=24, N=32, K=16),
    "conv2d": dict(N=1, C=8, H=10, W=12, K=32, R=3, S=3, stride=1, pad=1),
    "depthwise_conv2d": dict(N=1, C=4, H=12, W=16, R=3, S=3, stride=1, pad=1, multiplier=1),
}
CROSS = {"llvm -mcpu=haswell": "<8 x float>", "llvm -mcpu=skylake-avx512": "<16 x float>"}


def _matmul_default(facts: CpuFacts, **params: int) -> dict:
    wl = autotune.workload("matmul", **params)
    sp = autotune.config_space(wl, autotune.Target(f"llvm -vector-bits={facts.vector_bits}"))
    return cpu_matmul.default_values(wl, facts, list(sp.knobs))


def test_register_tile_follows_vector_width_and_registers() -> None:
    avx2 = _matmul_default(AVX2, M=96, N=96, K=64)
    avx512 = _matmul_default(AVX512, M=96, N=96, K=64)
    assert avx2["tile_i"][-1] == 6 and avx2["tile_j"][-1] == 16  # 6 x 2 ymm accumulators
    assert avx512["tile_i"][-1] == 12 and avx512["tile_j"][-1] == 32  # 12 x 2 zmm


def test_register_tile_falls_back_to_the_factors_the_space_has() -> None:
    tile = _matmul_default(AVX2, M=512, N=512, K=512)
    assert tile["tile_i"][-1] * tile["tile_j"][-1] // 8 == 8  # 4 x 16: no 6 divides 512


@pytest.mark.parametrize("small, big", [(16 * 1024, 64 * 1024), (32 * 1024, 48 * 1024)])
def test_bigger_l1_gives_bigger_or_equal_blocks(small: int, big: int) -> None:
    conv = autotune.workload("conv2d", **WORKLOADS["conv2d"] | dict(C=256))
    dw = autotune.workload("depthwise_conv2d", N=1, C=4, H=64, W=64, R=3, S=3, stride=1, pad=1)
    target = autotune.Target("llvm -mcpu=haswell")
    for wl, mod, name in ((conv, cpu_conv2d, "tile_rc"), (dw, cpu_depthwise, "tile_y")):
        knobs = list(autotune.config_space(wl, target).knobs)
        lo = mod.default_values(wl, replace(AVX2, l1d=small), knobs)[name]
        hi = mod.default_values(wl, replace(AVX2, l1d=big), knobs)[name]
        assert hi[1] >= lo[1]
    assert (cpu_conv2d.default_values(conv, replace(AVX2, l1d=4 * 1024), knobs := list(
        autotune.config_space(conv, target).knobs))["tile_rc"][1]
            < cpu_conv2d.default_values(conv, replace(AVX2, l1d=256 * 1024), knobs)["tile_rc"][1])


def test_more_cores_parallelise_more_loops() -> None:
    wl = autotune.workload("conv2d", **WORKLOADS["conv2d"])
    knobs = list(autotune.config_space(wl, autotune.Target("llvm -mcpu=haswell")).knobs)
    one = cpu_conv2d.default_values(wl, replace(AVX2, cores=1), knobs)["parallel"]
    many = cpu_conv2d.default_values(wl, replace(AVX2, cores=64), knobs)["parallel"]
    assert many > one


def test_facts_of_targets() -> None:
    assert facts_of(autotune.Target("llvm -mcpu=haswell")).vector_registers == 16
    avx512 = facts_of(autotune.Target("llvm -mcpu=skylake-avx512"))
    assert (avx512.vector_bits, avx512.vector_registers) == (512, 32)
    host = facts_of(autotune.Target("llvm"))
    assert 0 < host.l1d < host.l2 < host.l3 and host.cores >= 1
    assert parse_size("32K\n") == 32 * 1024 and parse_size("1M") == 1024**2


def test_fma_is_told_from_the_features_and_unknown_without_them() -> None:
    assert has_fma("+avx2,+fma,-avx512f") is True
    assert has_fma("+avx512f,-fma") is True  # AVX-512F has its own fused multiply-add
    assert has_fma("+sse4.2,-fma,-avx512f") is False
    assert has_fma("") is None
    host = autotune.Target("llvm")
    other = "haswell" if host.mcpu != "haswell" else "skylake-avx512"
    assert facts_of(autotune.Target(f"llvm -mcpu={other}")).fma is None  # not the host
    assert facts_of(host).fma is has_fma(host.features)
    assert "FMA" in facts_of(host).describe()


def _cases() -> list[tuple[str, tuple[str, ...]]]:
    return [(op, epi) for op in WORKLOADS for epi in EPILOGUES]


@pytest.mark.parametrize("spec", list(CROSS))
@pytest.mark.parametrize("op, epi", _cases())
def test_default_is_valid_and_uses_the_vector_width(spec: str, op: str, epi: tuple) -> None:
    target = autotune.Target(spec)
    wl = autotune.workload(op, epilogue=epi, **WORKLOADS[op])
    sp = autotune.config_space(wl, target)
    cfg = sp.default()
    assert sp.invalid_reason(cfg) is None
    assert sp.get(cfg.index) == cfg
    text = driver.source(wl, target, cfg)
    assert CROSS[spec] in text
    assert driver.build(wl, target, cfg).binary  # cross-compiles without the hardware


@pytest.mark.parametrize("op, epi", _cases())
def test_default_runs_on_the_host_and_matches_numpy(op: str, epi: tuple) -> None:
    wl = autotune.workload(op, epilogue=epi, **WORKLOADS[op])
    args = wl.random_args(0)
    ref = wl.reference(args)
    autotune.compile(wl, autotune.Target("llvm"))(*args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


@pytest.mark.parametrize("mcpu", ["skylake-avx512", "haswell"])
def test_matmul_default_packs_a_where_its_row_tiles_overhang(mcpu: str) -> None:
    """ViT's 197 tokens in row tiles of 8 read A from padded packed panels (1.21-1.33x faster
    on a 2-core Rocket Lake); rows the tiles divide keep A in place (packing cost up to
    16%), and the packed default matches numpy, its tail rows included."""
    target = autotune.Target(f"llvm -mcpu={mcpu}")
    for M, N, K, packed in ((197, 2304, 768, True), (197, 197, 64, True),
                            (256, 512, 256, False), (1024, 1024, 1024, False)):
        wl = autotune.workload("matmul", M=M, N=N, K=K, epilogue=("bias",), prepacked=True)
        cfg = autotune.config_space(wl, target).default()
        rows = int(np.prod(cfg["tile_i"]))
        assert (rows > M) == packed and cfg["pack_a"] == packed, (str(wl), cfg)
    wl = autotune.workload("matmul", M=197, N=96, K=64, epilogue=("bias",))
    assert autotune.config_space(wl, autotune.Target("llvm")).default()["pack_a"]
    args = wl.random_args(0)
    ref = wl.reference(args)
    autotune.compile(wl, autotune.Target("llvm"))(*args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_default_register_tile_has_no_tail_and_fills_its_vectors() -> None:
    # 56 columns: a 16-wide tile leaves a masked tail (6 GFLOP/s on AVX2), 8 x 8 runs at 21.
    wl = autotune.workload("depthwise_conv2d", N=1, C=128, H=56, W=56, R=3, S=3, stride=1,
                           pad=1)
    x2 = autotune.config_space(wl, autotune.Target("llvm -mcpu=haswell")).default()["tile_x"][-1]
    assert 56 % x2 == 0 and x2 % 8 == 0


def test_avx512_depthwise_default_takes_full_vectors_with_a_masked_tail() -> None:
    # 56 columns on 16 lanes: 8 x 32 with a tail ran 158 GFLOP/s, 8 x 28 (16 + 8 + 4 per
    # row) 110; the padding inlined, not materialised in a pass of its own (67 -> 103).
    wl = autotune.workload("depthwise_conv2d", N=1, C=16, H=56, W=56, R=3, S=3, stride=1,
                           pad=1)
    target = autotune.Target("llvm -mcpu=skylake-avx512")
    sp = autotune.config_space(wl, target)
    cfg = cpu_depthwise.default_values(wl, AVX512, list(sp.knobs))
    assert cfg["tile_x"][-1] % 16 == 0 and 56 % cfg["tile_x"][-1] != 0
    assert cfg["pad"] == "inline"
    config = sp.config(cfg)
    if facts_of(autotune.Target("llvm")).vector_bits < 512:
        assert driver.build(wl, target, config).binary  # the host cannot run it
        return
    args = wl.random_args(0)
    ref = wl.reference(args)
    autotune.compile(wl, autotune.Target("llvm"), config={"knobs": cfg})(*args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


@pytest.mark.parametrize("k", [1280, 24, 40])
def test_conv_default_register_rows_are_whole_vectors(k: int) -> None:
    # 40 output channels on 16 lanes (a 16+16+8 row) ran 8 GFLOP/s in conv2d 320->1280 1x1
    # on AVX-512; 32 ran 223. One partial vector (12 of 16) is fine: 153 for 144->24.
    wl = autotune.workload("conv2d", N=1, C=64, H=7, W=7, K=k, R=1, S=1, stride=1, pad=0)
    sp = autotune.config_space(wl, autotune.Target("llvm -mcpu=skylake-avx512"))
    k2 = cpu_conv2d.default_values(wl, AVX512, list(sp.knobs))["tile_k"][-1]
    assert k2 <= 16 or k2 % 16 == 0


def test_avx512_conv_default_takes_vectors_of_channels_with_a_masked_tail() -> None:
    # ShuffleNet's 122 channels: 16 (or 32) with a tail ran 0.10 ms, the exact 2 0.63
    wl = autotune.workload("conv2d", N=1, C=122, H=28, W=28, K=122, R=1, S=1, stride=1, pad=0,
                           epilogue=["bias", "relu"])
    avx512 = autotune.config_space(wl, autotune.Target("llvm -mcpu=skylake-avx512"))
    k2 = cpu_conv2d.default_values(wl, AVX512, list(avx512.knobs))["tile_k"][-1]
    assert k2 % 16 == 0 and 122 % k2 != 0
    avx2 = autotune.config_space(wl, autotune.Target("llvm -mcpu=haswell"))
    assert 122 % cpu_conv2d.default_values(wl, AVX2, list(avx2.knobs))["tile_k"][-1] == 0
    # the tail tile's masked code, on this host (native masks or not), against numpy
    host = autotune.config_space(wl, autotune.Target("llvm"))
    config = host.config({**host.default().to_dict()["knobs"], "tile_k": (2, 4, 16),
                          "vec": "k"})
    args = wl.random_args(0)
    driver.compile(wl, autotune.Target("llvm"), config)(*args)
    np.testing.assert_allclose(args[-1], wl.reference(args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("vec", ["k", "x"])
def test_conv_write_back_is_vectorised_along_columns(vec: str) -> None:
    """Both ways a conv accumulates, it writes `out` (and reads a residual) a vector of
    output columns at a time: contiguous, not one lane per channel plane."""
    from autotune.ir.expr import Var, walk
    from autotune.ir.stmt import For, ForKind, Store, walk_stmts

    wl = autotune.workload("conv2d", epilogue=("bias", "residual", "relu"),
                           **WORKLOADS["conv2d"])
    target = autotune.Target("llvm")
    space = autotune.config_space(wl, target)
    cfg = space.config(dict(space.default()) | {"vec": vec})
    func = driver.lower(wl, target, cfg)
    writes = [(loop, s) for loop in walk_stmts(func.body)
              if isinstance(loop, For) and loop.kind is ForKind.VECTORIZED
              for s in walk_stmts(loop.body) if isinstance(s, Store) and s.buffer.name == "out"]
    assert writes
    for loop, store in writes:
        column = store.indices[-1]
        assert loop.var in {x for x in walk(column) if isinstance(x, Var)}
        assert all(loop.var not in set(walk(i)) for i in store.indices[:-1])


@pytest.mark.parametrize("facts", [AVX2, AVX512])
def test_strided_depthwise_default_tiles_at_most_a_vector_of_inputs_and_two_rows(
        facts: CpuFacts) -> None:
    # MobileNet-V2's stride-2 layers: a strided row gathers its inputs (8 x 32 on AVX-512
    # ran ~9x slower than 2 x 8)
    target = autotune.Target(f"llvm -vector-bits={facts.vector_bits}")

    def tile(C: int, H: int, stride: int) -> tuple[int, int]:
        wl = autotune.workload("depthwise_conv2d", N=1, C=C, H=H, W=H, R=3, S=3,
                               stride=stride, pad=1)
        d = cpu_depthwise.default_values(wl, facts, list(autotune.config_space(wl, target).knobs))
        return d["tile_y"][-1], d["tile_x"][-1]

    for C, H in ((96, 112), (144, 56), (192, 28)):
        rows, columns = tile(C, H, 2)
        assert 1 < columns <= facts.lanes // 2 and 1 < rows <= cpu_depthwise.MAX_STRIDED_ROWS
    assert tile(576, 14, 2) == (7, 7)  # 7x7 output: one row or column alone would be worse
    assert tile(96, 56, 1)[1] > facts.lanes // 2  # unstrided: wide rows, as before
