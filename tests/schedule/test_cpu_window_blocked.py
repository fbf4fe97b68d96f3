"""The CPU template of depthwise convs and max-pools in NCHW[x]c: real generated kernels
against numpy (strides 1 and 2, 3x3 and 5x5 windows, padding inlined and buffered,
epilogues), sampled configs, the prepacked depthwise weight, a default register tile
within the vector registers."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.driver import compile as compile_kernel
from autotune.driver import compile_prepacked, config_space
from autotune.ops import WorkloadError, aligned_empty
from autotune.schedule.templates.cpu_window_blocked import unrolled_step
from autotune.target.cpu_facts import facts_of
from tests.spaces import valid_configs

LLVM = autotune.Target("llvm")
LANES = LLVM.vector_lanes

CASES = [  # (op, params, epilogue, layout)
    ("depthwise_conv2d", dict(N=1, C=32, H=10, W=9, R=3, S=3, stride=1, pad=1),
     ["bias", "relu6"], f"NCHW{LANES}c"),
    ("depthwise_conv2d", dict(N=2, C=16, H=11, W=13, R=5, S=5, stride=2, pad=2),
     ["scale_shift", "residual", "hardswish"], "NCHW8c"),
    ("max_pool2d", dict(N=1, C=32, H=15, W=14, R=3, S=3, stride=2, pad=1), [],
     f"NCHW{LANES}c"),
    ("max_pool2d", dict(N=1, C=8, H=7, W=9, R=2, S=2, stride=2, pad=0), [], "NCHW8c"),
    # Inception's branch pool (3x3, stride 1, zero padding counted) and DenseNet's transition
    ("avg_pool2d", dict(N=1, C=32, H=13, W=11, R=3, S=3, stride=1, pad=1), [],
     f"NCHW{LANES}c"),
    ("avg_pool2d", dict(N=2, C=8, H=8, W=9, R=2, S=2, stride=2, pad=0), [], "NCHW8c"),
]


def _workload(case: int, prepacked: bool = False) -> autotune.Workload:
    op, params, epilogue, layout = CASES[case]
    return autotune.workload(op, epilogue=epilogue, layout=layout, **params,
                             prepacked=prepacked and op == "depthwise_conv2d")


def _check(kernel, wl) -> None:
    args = wl.random_args(1)
    kernel(*args)
    ref = wl.reference(args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


@pytest.mark.parametrize("case", range(len(CASES)))
def test_default_config_matches_numpy(case: int) -> None:
    wl = _workload(case)
    _check(compile_kernel(wl, LLVM), wl)


@pytest.mark.parametrize("case", [1, 2, 4])
def test_sampled_configs_match_numpy(case: int) -> None:
    wl = _workload(case)
    space = config_space(wl, LLVM)
    for cfg in valid_configs(space, 4, skip=[space.default().index]):
        _check(compile_kernel(wl, LLVM, cfg), wl)


@pytest.mark.parametrize("pad, rs_inner", [("buffer", False), ("inline", True)])
def test_padding_and_window_order_match_numpy(pad: str, rs_inner: bool) -> None:
    for case in (1, 2, 4):
        wl = _workload(case)
        values = config_space(wl, LLVM).default().to_dict()["knobs"]
        _check(compile_kernel(wl, LLVM, {"knobs": {**values, "pad": pad,
                                                   "rs_inner": rs_inner}}), wl)


def test_prepacked_depthwise_reads_vectors_of_channels() -> None:
    wl = _workload(0, prepacked=True)
    kernel, pack = compile_prepacked(wl, LLVM)
    assert pack is not None
    args = wl.random_args(2)
    packed = aligned_empty(pack.arg_buffers[-1].shape)
    pack(args[1], packed)
    # Wp[co, r, s, ci] = W[co*x + ci, 0, r, s]
    assert packed.shape == (32 // LANES, 3, 3, LANES)
    assert packed[1, 2, 0, 3] == args[1][LANES + 3, 0, 2, 0]
    kernel(args[0], packed, *args[2:])
    ref = wl.reference(args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_default_register_tile_fits_the_vector_registers() -> None:
    facts = facts_of(LLVM)
    for case in range(len(CASES)):
        wl = _workload(case)
        acc, _ = unrolled_step(wl.block, LANES, 1, config_space(wl, LLVM).default())
        assert acc <= 3 * facts.vector_registers // 4, wl
    # MobileNet-V2's 144-channel 56x56 layer: a tile of a quarter of the registers or more
    wl = autotune.workload("depthwise_conv2d", N=1, C=144, H=56, W=56, R=3, S=3, stride=1,
                           pad=1, layout=f"NCHW{LANES}c")
    acc, _ = unrolled_step(wl.block, LANES, 1, config_space(wl, LLVM).default())
    assert acc >= facts.vector_registers // 4


def test_blocked_layouts_name_the_field_they_break() -> None:
    with pytest.raises(WorkloadError) as err:
        autotune.workload("depthwise_conv2d", N=1, C=16, H=8, W=8, R=3, S=3, stride=1, pad=1,
                          multiplier=2, layout="NCHW8c")
    assert err.value.field == "params.multiplier"
    with pytest.raises(WorkloadError) as err:
        autotune.workload("max_pool2d", N=1, C=16, H=8, W=8, R=3, S=3, stride=1, pad=1,
                          layout="NCHW>NCHW8c")
    assert err.value.field == "layout"
    with pytest.raises(WorkloadError) as err:
        autotune.Workload.from_dict({"op": "depthwise_conv2d", "prepacked": True, "params": {
            "N": 1, "C": 16, "H": 8, "W": 8, "R": 3, "S": 3, "stride": 1, "pad": 1}})
    assert err.value.field == "prepacked" and "blocked layout only" in str(err.value)
