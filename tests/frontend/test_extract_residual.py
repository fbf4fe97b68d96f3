"""Residual adds fused into the conv kernel (the `residual` epilogue): which adds extraction
takes, and `compile_model` running them fused against torch."""
from __future__ import annotations

import operator
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import fx, nn  # noqa: E402

import autotune  # noqa: E402
from autotune.api import NoTunedScheduleWarning  # noqa: E402
from autotune.frontend.runtime import kernel_modules  # noqa: E402
from tests.frontend.frontend_nets import TinyMobileNet, TinyResNet, randomize_bn  # noqa: E402

X = (1, 3, 32, 32)
ADDS = (operator.add, operator.iadd, torch.add)


def left_in_torch(gm: fx.GraphModule) -> dict[str, int]:
    """Adds and ReLU/ReLU6 left to torch in a compiled graph."""
    modules = dict(gm.named_modules())
    out = {"add": 0, "act": 0}
    for n in gm.graph.nodes:
        if (n.op == "call_function" and n.target in ADDS) or (
                n.op == "call_method" and n.target == "add"):
            out["add"] += 1
        elif n.op == "call_module" and isinstance(modules[n.target], (nn.ReLU, nn.ReLU6)):
            out["act"] += 1
    return out


def compiled(model: nn.Module, x: torch.Tensor) -> fx.GraphModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoTunedScheduleWarning)
        return autotune.compile_model(model, (x,), db=None, layout="nchw")  # NCHW modules


def assert_close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


@pytest.mark.parametrize("net, adds", [(TinyResNet, 3), (TinyMobileNet, 2)])
def test_residual_blocks_run_fused(net, adds):
    torch.manual_seed(0)
    model = randomize_bn(net())
    x = torch.randn(X)
    traced = fx.symbolic_trace(model)
    before = left_in_torch(traced)
    assert before["add"] == adds  # the nets' shortcuts, as torch runs them
    gm = compiled(model, x)
    assert left_in_torch(gm) == {"add": 0, "act": 0}
    fused = [m for m in kernel_modules(gm) if "residual" in m.workload.epilogue]
    assert len(fused) == adds
    with torch.no_grad():
        assert_close(gm(x), model(x))
        x2 = torch.randn(2, *X[1:])  # another batch: torch runs the folded groups, add included
        assert_close(gm(x2), model(x2))


class Shortcuts(nn.Module):
    """The ways a shortcut is written: ``+=`` then relu, identity first, torch.add, the
    add's result used twice, an add after the relu, and a broadcast add."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(8, 8, 3, padding=1) for _ in range(6))
        self.bns = nn.ModuleList(nn.BatchNorm2d(8) for _ in range(6))
        self.relu = nn.ReLU(inplace=True)
        self.row = nn.Parameter(torch.randn(1, 8, 1, 1))

    def forward(self, x):
        out = self.bns[0](self.convs[0](x))
        out += x                                   # torchvision's BasicBlock
        a = self.relu(out)
        b = a + self.bns[1](self.convs[1](a))      # identity first, no relu (MobileNet-V2)
        c = torch.add(self.convs[2](b), b)         # no BatchNorm
        d = self.convs[3](c) + c
        e = torch.relu(d) * d                      # the add's result used twice: no relu
        f = self.relu(self.bns[4](self.convs[4](e))) + e  # relu first: the add stays
        return self.bns[5](self.convs[5](f)) + self.row   # broadcast: the add stays


def test_shortcut_forms():
    torch.manual_seed(1)
    model = randomize_bn(Shortcuts())
    x = torch.randn(1, 8, 6, 6)
    found = autotune.extract(model, (x,), target=None)
    chains = {n: t.workload.epilogue for t in found.tasks for n in t.nodes}
    assert chains == {
        "convs.0": ("bias", "residual", "relu"),
        "convs.1": ("bias", "residual"),
        "convs.2": ("bias", "residual"),
        "convs.3": ("bias", "residual"),
        "convs.4": ("bias", "relu"),
        "convs.5": ("bias",),
    }
    gm = compiled(model, x)
    assert left_in_torch(gm)["add"] == 2  # after the relu, and the broadcast one
    with torch.no_grad():
        assert_close(gm(x), model(x))


def test_kernel_arguments_in_order_on_both_call_paths():
    """The kernel takes the main input, the weights, then the residual: through the bound
    call (aligned tensors) and the checked one (an input 4 bytes off alignment)."""
    torch.manual_seed(2)
    model = randomize_bn(TinyResNet())
    gm = compiled(model, torch.randn(X))
    mod = next(m for m in kernel_modules(gm) if "residual" in m.workload.epilogue)
    xs = [torch.randn(s) for s in mod.in_shapes]
    with torch.no_grad():
        want = mod.forward_torch(*xs)
        assert_close(mod(*xs), want)
        shifted = torch.empty(xs[1].numel() + 1)[1:].view(xs[1].shape)
        shifted.copy_(xs[1])
        assert shifted.data_ptr() % 64 and shifted.is_contiguous()
        assert_close(mod(xs[0], shifted), want)
