"""Weights packed once: the kernel that reads a packed constant operand, and the kernel
that packs it, together compute what the usual kernel does."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.driver import compile_prepacked, config_space
from autotune.ops import aligned_empty

LLVM = autotune.Target("llvm")


def _run_prepacked(wl, config) -> tuple[np.ndarray, np.ndarray, tuple]:
    kernel, pack = compile_prepacked(wl, LLVM, config)
    assert pack is not None
    args = wl.random_args(0)
    ref = wl.reference(args)
    packed = aligned_empty(pack.arg_buffers[-1].shape)
    pack(args[1], packed)
    kernel(args[0], packed, *args[2:])
    return args[-1], ref, packed.shape


@pytest.mark.parametrize("k, pack", [(32, 16), (40, 16)])  # 40: the last panel is zero-filled
def test_prepacked_conv_matches_numpy(k: int, pack: int) -> None:
    wl = autotune.workload("conv2d", N=1, C=8, H=9, W=10, K=k, R=3, S=3, stride=1, pad=1,
                           epilogue=["bias", "relu6"])
    sp = config_space(wl, LLVM)
    values = sp.default().to_dict()["knobs"]
    tile_k = next(c for c in sp.knob("tile_k").candidates if c[-1] == pack)
    got, ref, shape = _run_prepacked(wl, {"knobs": {**values, "tile_k": list(tile_k),
                                                    "vec": "k", "pack_w": True}})
    assert shape == (-(-k // pack), 8, 3, 3, pack)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_prepacked_matmul_matches_numpy() -> None:
    wl = autotune.workload("matmul", M=64, N=48, K=24, epilogue=["bias"])
    values = config_space(wl, LLVM).default().to_dict()["knobs"]
    got, ref, _ = _run_prepacked(wl, {"knobs": {**values, "pack_b": True}})
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_nothing_to_prepack_gives_the_usual_kernel() -> None:
    dw = autotune.workload("depthwise_conv2d", N=1, C=4, H=8, W=8, R=3, S=3, stride=1, pad=1)
    kernel, pack = compile_prepacked(dw, LLVM)
    assert pack is None
    args = dw.random_args(0)
    kernel(*args)
    np.testing.assert_allclose(args[-1], dw.reference(args), rtol=1e-4, atol=1e-4)
    conv = autotune.workload("conv2d", N=1, C=8, H=6, W=6, K=32, R=1, S=1, stride=1, pad=0)
    values = config_space(conv, LLVM).default().to_dict()["knobs"]
    kernel, pack = compile_prepacked(conv, LLVM, {"knobs": {**values, "pack_w": False}})
    assert pack is None and kernel.arg_buffers[1].shape == (32, 8, 1, 1)
