"""Extraction of ResNet-like and MobileNet-like models, and `compile_model` against torch."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import autotune  # noqa: E402
from autotune.api import NoTunedScheduleWarning  # noqa: E402
from autotune.frontend.runtime import kernel_modules, plan_model  # noqa: E402
from autotune.ops import workload  # noqa: E402
from tests.frontend.frontend_nets import TinyMobileNet, TinyResNet, randomize_bn  # noqa: E402

X = (1, 3, 32, 32)


def conv(C, H, K, R, stride, pad, epilogue):
    return workload("conv2d", N=1, C=C, H=H, W=H, K=K, R=R, S=R, stride=stride, pad=pad,
                    epilogue=epilogue)


def dw(C, H, stride, epilogue):
    return workload("depthwise_conv2d", N=1, C=C, H=H, W=H, R=3, S=3, stride=stride, pad=1,
                    epilogue=epilogue)


def counts(model_tasks):
    return {t.workload: t.weight for t in model_tasks.tasks}


def test_resnet_tasks_and_counts():
    found = autotune.extract(TinyResNet(), (torch.randn(X),), target=None)
    assert counts(found) == {
        conv(3, 32, 16, 7, 2, 3, ["bias", "relu"]): 1,       # stem: conv-bn-relu, 7x7 s2
        conv(16, 8, 16, 3, 1, 1, ["bias", "relu"]): 2,       # conv1 of layer1's blocks
        conv(16, 8, 16, 3, 1, 1, ["bias", "residual", "relu"]): 2,  # conv2 + x, then relu
        conv(16, 8, 32, 3, 2, 1, ["bias", "relu"]): 1,       # stride 2
        conv(32, 4, 32, 3, 1, 1, ["bias", "residual", "relu"]): 1,  # + the downsample's
        conv(16, 8, 32, 1, 2, 0, ["bias"]): 1,               # 1x1 downsample: the add is taken
        workload("matmul", M=1, N=10, K=32, epilogue=["bias"]): 1,  # fc
    }
    assert found.unsupported == ()
    assert all(len(t.nodes) == t.weight for t in found.tasks)
    by_wl = {t.workload: t.nodes for t in found.tasks}
    assert by_wl[conv(16, 8, 16, 3, 1, 1, ["bias", "relu"])] == ("layer1.0.conv1",
                                                                 "layer1.1.conv1")
    flops = [t.weight * t.workload.flops() for t in found.tasks]
    assert flops == sorted(flops, reverse=True)


def test_resnet_max_pool_is_a_task_on_llvm_only():
    def pools(target):
        found = autotune.extract(TinyResNet(), (torch.randn(X),), target=target,
                                 layout="nchw")
        assert found.unsupported == ()
        return {t.workload: t.nodes for t in found.tasks if t.workload.op == "max_pool2d"}

    stem = workload("max_pool2d", N=1, C=16, H=16, W=16, R=3, S=3, stride=2, pad=1)
    assert pools("llvm") == {stem: ("stem.3",)}
    assert pools("cuda -arch=sm_80") == {} and pools(None) == {}  # stays in torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no records: default configs
        planned = plan_model(TinyResNet(), (torch.randn(X),), target="llvm", db=None,
                             layout="nchw")
    (pool,) = [p for p in planned if p.workload.op == "max_pool2d"]
    assert pool.places == ("stem.3",)
    assert pool.config == autotune.config_space(stem, autotune.Target("llvm")).default()


def test_resnet18_stem_pool_is_matched():
    from benchmarks.models import resnet18

    model, inputs = resnet18()
    found = autotune.extract(model, inputs, target="llvm", layout="nchw")
    (pool,) = [t for t in found.tasks if t.workload.op == "max_pool2d"]
    assert pool.nodes == ("maxpool",)
    assert pool.workload == workload("max_pool2d", N=1, C=64, H=112, W=112, R=3, S=3, stride=2,
                                     pad=1)


class Pools(nn.Module):
    """Max-pools as modules and functions: those with dilation or indices are torch's; the
    rest (ceil_mode too: 9x11 pooled by 2 rounds up to 5x6) autotune's."""

    def __init__(self) -> None:
        super().__init__()
        self.plain = nn.MaxPool2d((2, 3), stride=(2, 1))
        self.ceil = nn.MaxPool2d(2, ceil_mode=True)
        self.dilated = nn.MaxPool2d(3, 1, 1, dilation=2)

    def forward(self, x):
        y = F.max_pool2d(self.plain(x), 3, 2, padding=1)
        z = torch.max_pool2d(x, [2], [])  # stride [] means the window
        idx = F.max_pool2d(x, 2, return_indices=True)[1]
        return y.sum() + z.sum() + self.ceil(x).sum() + self.dilated(x).sum() + idx.sum()


def test_max_pools_functional_and_unsupported():
    found = autotune.extract(Pools(), torch.randn(1, 2, 9, 11), target="llvm")
    assert counts(found) == {
        workload("max_pool2d", N=1, C=2, H=9, W=11, R=2, S=3, stride=(2, 1), pad=0): 1,
        workload("max_pool2d", N=1, C=2, H=4, W=9, R=3, S=3, stride=2, pad=1): 1,
        workload("max_pool2d", N=1, C=2, H=9, W=11, R=2, S=2, stride=2, pad=0): 1,
        workload("max_pool2d", N=1, C=2, H=9, W=11, R=2, S=2, stride=2, pad=0, ceil_mode=1): 1,
    }
    listed = {u.node: u.reason for u in found.unsupported}
    assert set(listed) == {"dilated", "max_pool2d_with_indices"}
    assert "dilation=(2, 2)" in listed["dilated"]
    assert "return_indices=True" in listed["max_pool2d_with_indices"]


def test_compiled_max_pools_match_torch():
    torch.manual_seed(0)
    model, x = Pools().eval(), torch.randn(1, 2, 9, 11) - 3.0  # all negative
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = autotune.compile_model(model, (x,), db=None)
    assert sorted(m.place for m in kernel_modules(compiled)) == ["ceil", "max_pool2d",
                                                                 "max_pool2d_1", "plain"]
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))
        x2 = torch.randn(1, 2, 12, 12)  # another shape: torch runs the pools
        assert torch.equal(compiled(x2), model(x2))


class AvgPools(nn.Module):
    """Average pools as modules and functions: those that count their padding, without
    ceil_mode or a divisor override, are autotune's (without padding, count_include_pad
    makes no difference); the rest stay torch's."""

    def __init__(self) -> None:
        super().__init__()
        self.transition = nn.AvgPool2d(2, stride=2)  # DenseNet's
        self.uncounted = nn.AvgPool2d(2, stride=2, count_include_pad=False)  # no padding
        self.ceil = nn.AvgPool2d(2, ceil_mode=True)
        self.overridden = nn.AvgPool2d(3, 1, 1, divisor_override=4)

    def forward(self, x):
        branch = F.avg_pool2d(x, kernel_size=3, stride=1, padding=1)  # Inception's
        uncounted = F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)
        return (self.transition(branch).sum() + self.uncounted(x).sum() + self.ceil(x).sum()
                + self.overridden(x).sum() + uncounted.sum())


def test_avg_pools_functional_and_unsupported():
    found = autotune.extract(AvgPools(), torch.randn(1, 2, 9, 11), target="llvm")
    assert counts(found) == {
        workload("avg_pool2d", N=1, C=2, H=9, W=11, R=3, S=3, stride=1, pad=1): 1,
        workload("avg_pool2d", N=1, C=2, H=9, W=11, R=2, S=2, stride=2, pad=0): 2,
    }
    listed = {u.node: u.reason for u in found.unsupported}
    assert set(listed) == {"ceil", "overridden", "avg_pool2d_1"}
    assert "ceil_mode=True" in listed["ceil"]
    assert "divisor_override=4" in listed["overridden"]
    assert "count_include_pad=False" in listed["avg_pool2d_1"]
    assert not autotune.extract(AvgPools(), torch.randn(1, 2, 9, 11),
                                target="cuda -arch=sm_90").tasks  # kernels on llvm only


def test_compiled_avg_pools_match_torch():
    torch.manual_seed(0)
    model, x = AvgPools().eval(), torch.randn(1, 2, 9, 11)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = autotune.compile_model(model, (x,), db=None)
    assert sorted(m.place for m in kernel_modules(compiled)) == ["avg_pool2d", "transition",
                                                                 "uncounted"]
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))
        x2 = torch.randn(1, 2, 12, 12)  # another shape: torch runs the pools
        torch.testing.assert_close(compiled(x2), model(x2))


def test_mobilenet_tasks_and_counts():
    found = autotune.extract(TinyMobileNet(), torch.randn(X), target=None)
    assert counts(found) == {
        conv(3, 32, 16, 3, 2, 1, ["bias", "relu"]): 1,
        conv(16, 16, 32, 1, 1, 0, ["bias", "relu6"]): 3,   # expansions, ReLU6 fused
        dw(32, 16, 1, ["bias", "relu6"]): 2,
        dw(32, 16, 2, ["bias", "relu6"]): 1,
        conv(32, 16, 16, 1, 1, 0, ["bias", "residual"]): 2,   # projections + x
        conv(32, 8, 24, 1, 1, 0, ["bias"]): 1,                # stride 2: no shortcut
        conv(24, 8, 64, 1, 1, 0, ["bias", "relu"]): 1,
        workload("matmul", M=1, N=10, K=64, epilogue=["bias"]): 1,
    }
    assert {n for t in found.tasks for n in t.nodes} >= {"blocks.0.block.3", "fc.1"}


class Clamps(nn.Module):
    """Activations written as functions: relu6 and hardtanh(0, 6) fuse, hardtanh(-1, 1) not."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        x = F.hardtanh(self.b(F.relu6(self.a(x))), min_val=0.0, max_val=6.0)
        return F.hardtanh(self.c(x))


def test_functional_relu6_and_hardtanh_fuse():
    found = autotune.extract(Clamps(), torch.randn(2, 8), target=None)
    epilogues = {t.nodes: t.workload.epilogue for t in found.tasks}
    assert epilogues == {("a", "b"): ("bias", "relu6"), ("c",): ("bias",)}


class Odd(nn.Module):
    """Operators autotune has no kernel for, beside two it has."""

    def __init__(self) -> None:
        super().__init__()
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.reflect = nn.Conv2d(8, 8, 3, padding=1, padding_mode="reflect")
        self.dilated_dw = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=8)
        self.dilated = nn.Conv2d(8, 8, 3, padding=2, dilation=2)
        self.conv1d = nn.Conv1d(8, 8, 1)

    def forward(self, x):
        y = self.dilated(self.dilated_dw(self.reflect(self.grouped(x))))
        return self.conv1d(y.flatten(2)), torch.matmul(x, x[0])


def test_unsupported_operators_are_listed():
    found = autotune.extract(Odd(), torch.randn(2, 8, 6, 6), target=None)
    listed = {u.node: u.reason for u in found.unsupported}
    assert set(listed) == {"reflect", "dilated_dw", "conv1d", "matmul"}
    assert "reflect" in listed["reflect"]
    assert "dilation" in listed["dilated_dw"] and "broadcast" in listed["matmul"]
    tasks = {t.workload.op: t.workload for t in found.tasks}
    assert set(tasks) == {"conv2d", "group_conv2d"}  # conv2d has dilation: it is a task
    assert tasks["conv2d"].params["dilation"] == (2, 2)
    # groups neither 1 nor the channel count: a grouped conv, its bias fused
    assert tasks["group_conv2d"] == workload("group_conv2d", N=2, C=8, H=6, W=6, K=8, R=3,
                                             S=3, stride=1, pad=1, groups=2,
                                             epilogue=["bias"])


class Attention(nn.Module):
    def forward(self, q, k):
        return torch.relu(torch.bmm(q, k.transpose(1, 2))) @ k


def test_bmm_is_batch_matmul():
    q, k = torch.randn(2, 4, 8), torch.randn(2, 6, 8)
    found = autotune.extract(Attention(), (q, k), target=None)
    assert counts(found) == {workload("batch_matmul", B=2, M=4, N=6, K=8): 1,
                             workload("batch_matmul", B=2, M=4, N=8, K=6): 1}


@pytest.mark.parametrize("net", [TinyResNet, TinyMobileNet])
def test_compile_model_matches_torch(net):
    torch.manual_seed(0)
    model = randomize_bn(net())
    x = torch.randn(X)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = autotune.compile_model(model, (x,), db=None)
    tasks = autotune.extract(model, (x,), target="llvm").tasks
    assert sum(issubclass(w.category, NoTunedScheduleWarning) for w in caught) == len(tasks)
    assert len(kernel_modules(compiled)) == sum(t.weight for t in tasks)
    pools = [m.place for m in kernel_modules(compiled) if m.kind == "pool"]
    assert pools == (["stem.3"] if net is TinyResNet else [])
    # conv weights the default schedules pack are packed once, at compile time
    assert any(m.kernel_params[0].shape != m.params[0].shape for m in kernel_modules(compiled))
    # the weights are bound once: a call passes only pointers, never the checked path
    checked = []
    for m in kernel_modules(compiled):
        m.kernel = _Refuse(m.kernel, checked)
    with torch.no_grad():
        want, got = model(x), compiled(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    assert checked == []
    assert not model.training and all(not m.training for m in model.modules())
    # another batch size: the kernels are specialised, torch runs the folded layers
    x2 = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(compiled(x2), model(x2), rtol=1e-4, atol=1e-4)


class _Refuse:
    """Stands in for a kernel's checked call, recording any use of it."""

    def __init__(self, kernel, seen: list) -> None:
        self.kernel, self.seen = kernel, seen

    def __call__(self, *arrays):
        self.seen.append(self.kernel.name)
        return self.kernel(*arrays)


def test_extract_leaves_the_model_in_training_mode():
    model = TinyResNet().train()
    autotune.extract(model, torch.randn(X), target=None)
    assert model.training


@torch.fx.wrap
def stochastic_depth(x: torch.Tensor, p: float, mode: str, training: bool = True
                     ) -> torch.Tensor:
    """torchvision.ops.stochastic_depth's signature (fx keeps a wrapped call as one node):
    random in training, the identity in eval."""
    if not training or p == 0.0:
        return x
    keep = torch.rand(x.shape[0], 1, 1, 1) >= p
    return x * keep / (1 - p)


class EvalIdentities(nn.Module):
    """Convs whose residual add follows dropout or stochastic depth, as EfficientNet's."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 1)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = stochastic_depth(self.a(x), 0.2, "row", self.training) + x
        y = F.dropout(self.drop(self.b(y)), 0.1, self.training) + y
        return y


def test_eval_identities_leave_the_graph_so_the_adds_fuse() -> None:
    model, x = EvalIdentities().eval(), torch.randn(1, 8, 6, 6)
    found = autotune.extract(model, (x,), target=None)
    assert found.unsupported == ()
    assert sorted(t.workload.epilogue for t in found.tasks) == [("bias", "residual")] * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoTunedScheduleWarning)
        compiled = autotune.compile_model(model, (x,), target="llvm", db=None)
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), rtol=1e-4, atol=1e-4)
