"""CPU templates reject configs whose unrolled reduction step is far too large to help
(`templates.common.unroll_limit`): they built for 5 to 17 s (past the 10 s build timeout on
2 cores) and spill. Within the bounds every config builds well inside the build timeout."""
from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest

import autotune
from autotune import driver
from autotune.measure import MeasureOptions
from autotune.schedule.templates.common import MAX_UNROLLED, vector_registers
from autotune.target import Target
from autotune.target.cpu_facts import facts_of

TARGET = Target("llvm")  # what builds here
# The space's rules, run nothing: the configs below were measured on an AVX-512 Zen 4.
AVX512 = Target("llvm -mcpu=skylake-avx512 -cores=2")
AVX2 = Target("llvm -mcpu=haswell -cores=2")
# The README's CLI examples.
CONV = autotune.workload("conv2d", N=1, C=64, H=56, W=56, K=64, R=3, S=3, stride=1, pad=1,
                         epilogue=["bias", "relu"])
MATMUL = autotune.workload("matmul", M=1024, N=1024, K=1024)


def registers(target: Target) -> int:
    return facts_of(target).vector_registers


def with_values(wl: Any, target: Target = AVX512, **values: Any) -> Any:
    """The default config of ``wl`` with knobs changed; a split given as its innermost factor
    (the first candidate of the knob that ends in it)."""
    space = driver.config_space(wl, target)
    default = space.default()
    chosen = {k.name: default[k.name] for k in space.knobs}
    for knob in space.knobs:
        if knob.name in values:
            value = values[knob.name]
            if isinstance(value, int) and type(knob).__name__ == "Split":
                value = next(c for c in knob.candidates if c[-1] == value)
            chosen[knob.name] = value
    return space, space.config(chosen)


def conv_step(cfg: Any, lanes: int) -> tuple[int, int]:
    """Accumulator registers and unrolled taps, counted from the config as written out."""
    k2, y2, x2 = cfg["tile_k"][2], cfg["tile_y"][2], cfg["tile_x"][2]
    row = k2 if cfg["vec"] == "k" else x2
    width = lanes if row % lanes == 0 else row  # the vector a row is split into
    per_row = row // width * -(-width // lanes)
    acc = per_row * (y2 * x2 if cfg["vec"] == "k" else k2 * y2)
    return acc, 9 if cfg["unroll_rs"] == "unroll" else 1


@pytest.mark.parametrize("values", [
    # measured on a 2-core Zen 4: 17.4 s, 12.8 s, 12.3 s, 7.0 s to build
    dict(tile_k=64, tile_y=8, tile_x=1, vec="x", unroll_rs="unroll"),
    dict(tile_k=1, tile_y=7, tile_x=14, vec="k", unroll_rs="unroll"),
    dict(tile_k=1, tile_y=7, tile_x=32, vec="k", unroll_rs="unroll"),
    dict(tile_k=16, tile_y=8, tile_x=2, vec="x", unroll_rs="unroll"),
])
def test_the_slowest_conv2d_builds_are_rejected_with_the_bound(values: dict) -> None:
    space, cfg = with_values(CONV, **values)
    acc, taps = conv_step(cfg, AVX512.vector_lanes)
    assert acc > 2 * registers(AVX512) or acc * taps > MAX_UNROLLED
    reason = space.invalid_reason(cfg)
    assert reason is not None and "exceeds" in reason
    assert str(2 * registers(AVX512)) in reason or str(MAX_UNROLLED) in reason
    with pytest.raises(driver.InvalidConfig):
        driver.build(CONV, AVX512, cfg)


@pytest.mark.parametrize("target", [AVX2, AVX512], ids=["avx2", "avx512"])
def test_the_bound_counts_the_unrolled_step(target: Target) -> None:
    """The templates' count agrees with the schedule written out above, over a sample."""
    space = driver.config_space(CONV, target)
    for cfg in space.sample(np.random.default_rng(0), 500):
        acc, taps = conv_step(cfg, target.vector_lanes)
        over = acc > 2 * registers(target) or acc * taps > MAX_UNROLLED
        reason = space.invalid_reason(cfg)
        if reason is None or "register tile" not in reason:
            assert (reason is not None) == over, (cfg, reason)


def test_matmul_spilling_tiles_are_rejected() -> None:
    # 16 rows x 8 ymm vectors (256-bit on an AVX-512 host): 128 accumulators, 5.5 s to build
    space, cfg = with_values(MATMUL, tile_i=16, tile_j=64, tile_k=16, unroll_k="unroll",
                             vector_bits=256)
    assert "exceeds" in (space.invalid_reason(cfg) or "")
    ok_space, ok = with_values(MATMUL, tile_i=8, tile_j=32, tile_k=4, unroll_k="unroll",
                               vector_bits=512)
    assert ok_space.invalid_reason(ok) is None


def test_wide_windows_default_to_a_loop_and_defaults_stay_valid() -> None:
    stem = autotune.workload("conv2d", N=1, C=3, H=224, W=224, K=64, R=7, S=7, stride=2, pad=3)
    wls = [CONV, MATMUL, stem,
           autotune.workload("depthwise_conv2d", N=1, C=32, H=112, W=112, R=7, S=7, stride=1,
                             pad=3),
           autotune.workload("depthwise_conv2d", N=1, C=32, H=112, W=112, R=3, S=3, stride=1,
                             pad=1),
           autotune.workload("batch_matmul", B=4, M=128, N=128, K=64)]
    for spec in ("llvm", "llvm -mcpu=haswell"):
        target = Target(spec)
        for wl in wls:
            space = driver.config_space(wl, target)
            assert space.invalid_reason(space.default()) is None, (spec, wl)
        stem_default = driver.config_space(stem, target).default()
        k2, y2, x2 = (stem_default[k][2] for k in ("tile_k", "tile_y", "tile_x"))
        lanes = target.vector_lanes
        unrolled = y2 * x2 * vector_registers(k2, lanes) * 49 <= MAX_UNROLLED
        assert stem_default["unroll_rs"] == ("unroll" if unrolled else "none")


def test_spaces_with_the_bound_still_pickle() -> None:
    """Spaces travel to lowering processes: the predicate must pickle."""
    for wl in (CONV, MATMUL):
        space = driver.config_space(wl, TARGET)
        back = pickle.loads(pickle.dumps(space))
        cfg = space.get(12345)
        assert back.invalid_reason(back.get(12345)) == space.invalid_reason(cfg)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_most_unrolled_accepted_configs_build_within_the_timeout() -> None:
    """The largest unrolled steps the bound lets through build inside the default build
    timeout (what a config past the bound did not)."""
    timeout = MeasureOptions().build_timeout
    space = driver.config_space(CONV, TARGET)
    valid = [c for c in space.sample(np.random.default_rng(1), 3000) if space.is_valid(c)]

    def step(cfg: Any) -> int:
        acc, taps = conv_step(cfg, TARGET.vector_lanes)
        return acc * taps

    biggest = sorted(valid, key=step)[-3:]
    # near the bound: twice the registers of 9 taps (288 on AVX2), or MAX_UNROLLED
    assert step(biggest[-1]) > min(2 * registers(TARGET) * 9, MAX_UNROLLED) // 2
    for cfg in biggest:
        artifact = driver.build(CONV, TARGET, cfg)
        assert artifact.build_s < timeout, (cfg, artifact.build_s)
