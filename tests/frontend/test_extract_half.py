"""Half-precision models: a float16 or bfloat16 model, a model called under autocast and an
autocast region inside a forward give workloads of that dtype; BatchNorm is folded in
float64 and rounded once; a target that cannot run a half group leaves it unsupported,
saying why; an autocast region is kept in the traced graph, so what stays in torch runs in
the region's dtype as in the model."""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import autotune  # noqa: E402
from autotune.frontend.torch import match_model, trace  # noqa: E402
from autotune.ops.dtypes import to_storage  # noqa: E402
from tests.frontend.frontend_nets import TinyMobileNet, TinyResNet, randomize_bn  # noqa: E402

CUDA = autotune.Target("cuda -arch=sm_90")
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _net(cls=TinyMobileNet, dtype=torch.float32):
    torch.manual_seed(0)
    return randomize_bn(cls()).to(dtype), torch.randn(1, 3, 32, 32).to(dtype)


@pytest.mark.parametrize("name", list(DTYPES))
def test_a_half_model_gives_the_float_models_tasks_in_its_dtype(name):
    model, x = _net()
    half, hx = _net(dtype=DTYPES[name])
    tasks = autotune.extract(half, hx, target=CUDA)
    assert not tasks.unsupported  # depthwise convs too: they have half kernels on cuda
    want = autotune.extract(model, x, target=CUDA).tasks
    assert [(t.workload, t.weight) for t in tasks.tasks] == \
        [(replace(t.workload, dtype=name), t.weight) for t in want]


def test_half_groups_an_llvm_target_cannot_run_are_unsupported_with_the_reason():
    model, x = _net(TinyResNet, torch.float16)
    tasks = autotune.extract(model, x, target="llvm")
    assert not tasks.tasks
    groups = autotune.extract(model, x, target=CUDA)
    assert len(tasks.unsupported) == sum(t.weight for t in groups.tasks) + 1  # and the pool
    for u in tasks.unsupported:
        assert "float16" in u.reason, u
    assert sum("not supported on llvm (CPU) targets" in u.reason for u in tasks.unsupported) \
        == sum(t.weight for t in groups.tasks)


@pytest.mark.parametrize("name", list(DTYPES))
def test_batchnorm_is_folded_in_float64_and_rounded_once(name):
    model, x = _net(TinyResNet, DTYPES[name])
    matches, _ = match_model(trace(model, (x,)))
    conv, bn = model.stem[0], model.stem[1]
    scale = bn.weight.double() / torch.sqrt(bn.running_var.double() + bn.eps)
    weight = (conv.weight.double() * scale[:, None, None, None]).detach().numpy()
    bias = (bn.bias.double() - bn.running_mean.double() * scale).detach().numpy()
    first = matches[0]
    assert first.workload.dtype == name and first.nodes[:2] == ("stem_0", "stem_1")
    np.testing.assert_array_equal(first.params[0], to_storage(weight, name))
    np.testing.assert_array_equal(first.params[1], to_storage(bias, name))


class AutocastInside(torch.nn.Module):
    """A float32 net whose body runs under autocast to bfloat16 (CPU: this host has no
    GPU; the frontend treats every device's autocast alike)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = randomize_bn(TinyResNet())

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.net(x)
        return y.float() * 2


def test_an_autocast_region_in_forward_gives_its_dtype_and_is_kept():
    torch.manual_seed(0)
    model, x = AutocastInside().eval(), torch.randn(1, 3, 32, 32)
    gm = trace(model, (x,))
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"][0] is \
        torch.amp._enter_autocast
    matches, unsupported = match_model(gm)
    assert not unsupported and {m.workload.dtype for m in matches} == {"bfloat16"}
    assert matches[0].cast and not matches[1].cast  # float32 image in, bfloat16 after
    # on llvm the bfloat16 groups stay in torch: the graph still runs them under autocast
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = autotune.compile_model(model, x, target="llvm", db=None)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=0, atol=0)


def test_a_model_called_under_autocast_gives_its_dtype():
    model, x = _net()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tasks = autotune.extract(model, x, target=CUDA)
    assert {t.workload.dtype for t in tasks.tasks} == {"bfloat16"}
