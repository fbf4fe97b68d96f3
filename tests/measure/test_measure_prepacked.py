"""Prepacked workloads: their own key, built as kernel plus pack kernel, and timed by the
runner with the constant operand packed once per argument set, outside the timing."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

import autotune
from autotune.api import NoTunedScheduleWarning
from autotune.driver import build, config_space, load
from autotune.measure import ErrorKind, LocalExecutor, MeasureInput, MeasureOptions
from autotune.measure.correctness import WorkloadData
from autotune.measure.run_worker import measure
from autotune.measure.timing import CacheFlusher
from autotune.ops import PREPACKABLE_OPS, Workload, WorkloadError
from autotune.ops.workload import BLOCKED_PREPACKABLE_OPS
from autotune.schedule.prepack import PACKED_OPERAND, pack_operand
from autotune.space import Config

LLVM = autotune.Target("llvm")
OPTS = MeasureOptions(repeat=3, min_repeat_ms=2.0, n_build_workers=1, run_timeout=10.0)
CONV = dict(N=1, C=16, H=8, W=8, K=32, R=3, S=3, stride=1, pad=1)


def _conv(prepacked: bool = True) -> Workload:
    return autotune.workload("conv2d", epilogue=["bias", "relu"], prepacked=prepacked, **CONV)


def _packing_config(wl: Workload, pack: bool = True) -> dict[str, Any]:
    values = config_space(wl, LLVM).default().to_dict()["knobs"]
    return {"knobs": {**values, "pack_w": pack}}


def test_the_prepacked_form_is_its_own_key_and_the_usual_key_is_unchanged() -> None:
    usual, packed = _conv(False), _conv(True)
    assert usual != packed and usual.key != packed.key
    assert "prepacked" not in usual.to_dict() and packed.to_dict()["prepacked"] is True
    assert Workload.from_json(packed.key) == packed and Workload.from_json(usual.key) == usual
    assert str(packed) == f"{usual} prepacked"
    assert set(PACKED_OPERAND) == PREPACKABLE_OPS | BLOCKED_PREPACKABLE_OPS


@pytest.mark.parametrize("data, message", [
    ({"op": "depthwise_conv2d", "params": {"N": 1, "C": 4, "H": 8, "W": 8, "R": 3, "S": 3,
                 "stride": 1, "pad": 1},
      "prepacked": True}, "in a blocked layout only"),
    ({"op": "max_pool2d", "params": {"N": 1, "C": 16, "H": 8, "W": 8, "R": 3, "S": 3,
                 "stride": 1, "pad": 1}, "layout": "NCHW16c",
      "prepacked": True}, "no constant operand"),
    ({"op": "matmul", "params": {"M": 2, "N": 3, "K": 4}, "prepacked": 1}, "boolean"),
])
def test_a_bad_prepacked_field_is_refused_at_that_field(data: dict, message: str) -> None:
    with pytest.raises(WorkloadError, match=message) as err:
        Workload.from_dict(data)
    assert err.value.loc == ("prepacked",)


def test_cuda_refuses_the_prepacked_form() -> None:
    with pytest.raises(ValueError, match="prepacked form is for llvm"):
        config_space(_conv(), autotune.Target("cuda -arch=sm_90"))


@pytest.mark.parametrize("wl", [
    _conv(),
    autotune.workload("matmul", M=32, N=40, K=24, epilogue=["bias"], prepacked=True),
])
def test_compile_of_a_prepacked_workload_exposes_its_pack_step(wl: Workload) -> None:
    knob = "pack_w" if wl.op == "conv2d" else "pack_b"
    values = config_space(wl, LLVM).default().to_dict()["knobs"]
    kernel = autotune.compile(wl, LLVM, {"knobs": {**values, knob: True}})
    assert kernel.pack is not None
    assert kernel.arg_buffers[1].name == PACKED_OPERAND[wl.op][1]
    args = wl.random_args(0)
    kernel(*pack_operand(wl, kernel.pack, args))
    ref = wl.reference(args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_a_prepacked_config_that_packs_nothing_is_the_usual_kernel() -> None:
    wl = _conv()
    artifact = build(wl, LLVM, _packing_config(wl, pack=False))
    assert artifact.pack is None and artifact.func.args[1].shape == (32, 16, 3, 3)


class _CountingPack:
    """A pack kernel that counts its calls (and may corrupt or refuse its output)."""

    def __init__(self, pack: Any, calls: list[int], how: str) -> None:
        self.pack, self.calls, self.how = pack, calls, how
        self.arg_buffers = pack.arg_buffers

    def __call__(self, operand: np.ndarray, packed: np.ndarray) -> None:
        self.calls.append(1)
        if self.how == "raise":
            raise ValueError("no room to pack")
        self.pack(operand, packed)
        if self.how == "negate":
            packed *= -1


def _counting_loader(calls: list[int], how: str = "") -> Any:
    def load_fn(artifact: Any, target: Any) -> Any:
        kernel = load(artifact, target)
        if kernel.pack is not None:
            kernel.pack = _CountingPack(kernel.pack, calls, how)
        return kernel
    return load_fn


def test_the_runner_packs_once_per_argument_set_outside_the_timing() -> None:
    wl = _conv()
    artifact = build(wl, LLVM, _packing_config(wl))
    assert artifact.pack is not None
    calls: list[int] = []
    data, flusher = WorkloadData(), CacheFlusher()
    for seed in (0, 1):  # two argument sets
        result = measure(artifact, wl, LLVM, replace(OPTS, seed=seed), _counting_loader(calls),
                         data, flusher)
        assert result.ok, result.error_msg
        # the kernel ran the warm-up, the calibration and 3 repeats of `number` calls
        assert len(result.costs) == 3 and result.extra["number"] >= 1
    assert len(calls) == 2


@pytest.mark.parametrize("how, kind, message", [
    ("negate", ErrorKind.WRONG_ANSWER, "max abs error"),  # checked on the weight as given
    ("raise", ErrorKind.RUNTIME, "packing failed: ValueError: no room to pack"),
])
def test_a_bad_pack_is_a_typed_failure(how: str, kind: ErrorKind, message: str) -> None:
    wl = _conv()
    calls: list[int] = []
    result = measure(build(wl, LLVM, _packing_config(wl)), wl, LLVM, OPTS,
                     _counting_loader(calls, how), WorkloadData(), CacheFlusher())
    assert result.error is kind and message in result.error_msg and calls == [1]


def test_both_forms_measure_in_the_real_runner() -> None:
    usual, packed = _conv(False), _conv(True)
    inputs = [MeasureInput(wl, LLVM, Config.from_json(_packing_config(wl, pack),
                                                      config_space(wl, LLVM)))
              for wl, pack in ((usual, True), (packed, True), (packed, False))]
    with LocalExecutor(LLVM, OPTS) as ex:
        results = ex.submit(inputs)
    assert all(r.ok for r in results), [r.error_msg for r in results]


def test_the_library_build_of_a_prepacked_workload_is_correct_against_numpy() -> None:
    wl = _conv()
    with pytest.warns(NoTunedScheduleWarning):  # no record: the default config
        kernel = autotune.build(wl, LLVM, db=None)
    assert kernel.pack is not None  # the default packs the weight into panels
    args = wl.random_args(1)
    kernel(*pack_operand(wl, kernel.pack, args))
    ref = wl.reference(args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
