"""A compiled model's CUDA group with a residual passes its device pointers in the kernel's
argument order (main input, weights, residual, output). No GPU here: the launch and the
stream are recorded instead (the one thing mocked is the hardware)."""
from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import autotune  # noqa: E402
from autotune.api import NoTunedScheduleWarning  # noqa: E402
from autotune.frontend.runtime import kernel_modules  # noqa: E402
from tests.cuda.cuda_cases import target  # noqa: E402
from tests.frontend.frontend_nets import TinyResNet, randomize_bn  # noqa: E402


def test_residual_group_passes_pointers_in_argument_order(nvcc, monkeypatch):
    torch.manual_seed(0)
    model, x = randomize_bn(TinyResNet()), torch.randn(1, 3, 32, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoTunedScheduleWarning)
        compiled = autotune.compile_model(model, x, target=target(), db=None)
    mod = next(m for m in kernel_modules(compiled) if "residual" in m.workload.epilogue)
    launched: list[list[int]] = []
    recorder = SimpleNamespace(launch=lambda pointers, stream: launched.append(pointers))
    monkeypatch.setattr(mod, "launcher", lambda ordinal: recorder)
    monkeypatch.setattr(mod, "_fits", lambda xs, params: True)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: SimpleNamespace(
        cuda_stream=0))
    xs = [torch.randn(s) for s in mod.in_shapes]
    mod(*xs)
    weight, bias = mod.torch_params()
    by_name = {"data": xs[0], "weight": weight, "bias": bias, "residual": xs[1]}
    args = [b.name for b in mod.kernel.func.args]
    assert args[-1] == "out" and set(args[:-1]) == set(by_name)
    assert launched[0][:-1] == [by_name[n].data_ptr() for n in args[:-1]]
