"""On llvm a model's layers with a constant weight are extracted, tuned and compiled as
prepacked workloads: what is tuned is the kernel the compiled model runs."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import autotune  # noqa: E402
from autotune.db import Database  # noqa: E402
from autotune.driver import config_space  # noqa: E402
from autotune.frontend.runtime import kernel_modules, plan_model  # noqa: E402
from autotune.measure.result import MeasureResult  # noqa: E402
from autotune.space import Config  # noqa: E402
from tests.frontend.frontend_nets import randomize_bn  # noqa: E402

LLVM = autotune.Target("llvm")


class Net(nn.Module):
    """A conv (+BN, ReLU), a depthwise conv, a linear layer and a matmul of activations."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 16, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.fc = nn.Linear(16 * 6 * 6, 8)

    def forward(self, x, y):
        h = self.dw(torch.relu(self.bn(self.conv(x))))
        return self.fc(h.flatten(1)) @ y


def _inputs() -> tuple:
    return torch.randn(2, 4, 6, 6), torch.randn(8, 5)


def _forms(tasks) -> dict[str, bool]:
    return {t.workload.op: t.workload.prepacked for t in tasks}


def test_extract_for_llvm_gives_the_constant_weight_layers_prepacked() -> None:
    model, inputs = Net(), _inputs()
    found = autotune.extract(model, inputs, target="llvm", layout="nchw")
    # matmul: the linear layer (a constant B) and the product of two activations (none)
    assert sorted((t.workload.op, t.workload.prepacked) for t in found.tasks) == [
        ("conv2d", True), ("depthwise_conv2d", False), ("matmul", False), ("matmul", True)]
    # this CPU is the default target
    assert autotune.extract(model, inputs, layout="nchw") == found
    assert not any(t.workload.prepacked for t in autotune.extract(model, inputs,
                                                                  target=None).tasks)
    assert not any(t.workload.prepacked for t in autotune.extract(
        model, inputs, target="cuda -arch=sm_90").tasks)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        planned = plan_model(model, inputs, target=LLVM, db=None, layout="nchw")
    assert {k.workload for k in planned} == {t.workload for t in found.tasks}


def test_compile_model_runs_the_prepacked_record(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, inputs = randomize_bn(Net()), _inputs()
    conv = next(t.workload for t in autotune.extract(model, inputs, target=LLVM,
                                                     layout="nchw").tasks
                if t.workload.op == "conv2d")
    space = config_space(conv, LLVM)
    default = space.default().to_dict()["knobs"]
    tile_k = next(c for c in space.knob("tile_k").candidates if c[-1] == 8)
    chosen = Config.from_json({"knobs": {**default, "tile_k": list(tile_k), "vec": "k",
                                         "pack_w": True}}, space)
    assert chosen.index != space.default().index
    url = f"sqlite:///{tmp_path / 'model.db'}"
    db = Database.open(url)
    db.add_trials(conv, LLVM, None, [(chosen, MeasureResult(costs=(1e-5,)))], conv.flops())
    db.dispose()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the other layers run their defaults
        compiled = autotune.compile_model(model, inputs, target=LLVM, db=url, layout="nchw")
    (module,) = [m for m in kernel_modules(compiled) if m.workload == conv]
    assert module.kernel.func.attrs["config_index"] == chosen.index
    assert module.kernel.pack is not None
    assert module.kernel_params[0].shape == module.kernel.pack.arg_buffers[-1].shape
    with torch.no_grad():
        want = model(*inputs)
        got = compiled(*inputs)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
