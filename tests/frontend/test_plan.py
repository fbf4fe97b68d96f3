"""The compiled model's plan (llvm): kernels back to back in native runs between torch
steps, outputs in one arena of a static memory plan; and the activations extraction fuses."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import autotune  # noqa: E402
from autotune.frontend.plan import ModelPlan, arena_offsets  # noqa: E402
from autotune.frontend.runtime import kernel_modules  # noqa: E402


def test_arena_offsets_share_memory_only_between_disjoint_lives() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 12))
        sizes = [int(s) for s in rng.integers(1, 5000, n)]
        starts = rng.integers(0, 20, n)
        lives = [(int(s), int(s + rng.integers(0, 6))) for s in starts]
        offsets, total = arena_offsets(sizes, lives)
        assert all(o % 16 == 0 and o + s <= total for o, s in zip(offsets, sizes))
        for i in range(n):
            for j in range(i):
                in_time = lives[i][0] <= lives[j][1] and lives[j][0] <= lives[i][1]
                in_space = offsets[i] < offsets[j] + sizes[j] and \
                    offsets[j] < offsets[i] + sizes[i]
                assert not (in_time and in_space), (sizes, lives, offsets)
    # a chain a -> b -> c: a and c never live together and take the same place
    offsets, total = arena_offsets([100, 100, 100], [(0, 1), (1, 2), (2, 3)])
    assert offsets[0] == offsets[2] and total == 2 * 112


class Net(nn.Module):
    """Kernels back to back (conv, conv, depthwise), torch ops between them that keep views
    of a kernel's output alive past the next kernels (flatten, a slice), new activations
    fused (hardswish, SiLU, sigmoid, GELU), and a view returned."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.c3 = nn.Conv2d(8, 8, 1)
        self.fc = nn.Linear(8 * 6 * 6, 10)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = F.hardswish(self.c1(x))
        b = F.silu(self.c2(a))
        view = b[:, :4]                      # a view of b, read after c3 ran
        c = torch.sigmoid(self.dw(b))
        d = F.gelu(self.c3(c)) + view.sum()  # a torch step between kernels
        return self.fc(torch.flatten(d, 1)), d


def _compiled_net() -> tuple[nn.Module, torch.Tensor, nn.Module]:
    """`Net`, an input, and the net compiled at it (default schedules)."""
    torch.manual_seed(0)
    model, x = Net().eval(), torch.randn(1, 3, 6, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model, x, autotune.compile_model(model, (x,), db=None)


def test_plan_runs_kernels_back_to_back_and_matches_torch() -> None:
    model, x, compiled = _compiled_net()
    plan = compiled.forward
    assert isinstance(plan, ModelPlan)
    acts = sorted(m.activation for m in kernel_modules(compiled) if m.activation)
    assert acts == ["gelu", "hardswish", "sigmoid", "silu"]  # every activation fused
    assert plan.kernels == 5 and plan.runs == 3  # c1 c2 | the slice | dw c3 | sum, add | fc
    with torch.no_grad():
        want = model(x)
        got = compiled(x)
        for g, w in zip(got, want):
            assert torch.allclose(g, w, rtol=1e-4, atol=1e-5)
        first = [g.clone() for g in got]
        x2 = torch.randn(1, 3, 6, 6)
        again = compiled(x2)  # reuses the arena: what the first call returned is unchanged
        assert all(torch.equal(a, b) for a, b in zip(got, first))
        assert all(torch.allclose(g, w, rtol=1e-4, atol=1e-5)
                   for g, w in zip(again, model(x2)))
        x3 = torch.randn(2, 3, 6, 6)  # another batch: the graph's own code, on torch
        assert all(torch.allclose(g, w, rtol=1e-4, atol=1e-5)
                   for g, w in zip(compiled(x3), model(x3)))
        strided = torch.randn(1, 3, 6, 12)[..., ::2]  # a view the kernels cannot read as is
        assert all(torch.allclose(g, w, rtol=1e-4, atol=1e-5)
                   for g, w in zip(compiled(strided), model(strided)))


def test_profile_times_each_kernel_and_torch_step_in_run_order() -> None:
    model, x, compiled = _compiled_net()
    plan, modules = compiled.forward, dict(compiled.named_modules())
    with torch.no_grad():
        times = plan.profile(x)
        kernels = [n.target for n, _ in times if n.op == "call_module"
                   and modules[str(n.target)] in kernel_modules(compiled)]
        graph_kernels = [n.target for n in compiled.graph.nodes if n.op == "call_module"
                         and modules[str(n.target)] in kernel_modules(compiled)]
        assert kernels == graph_kernels  # each kernel once, in the graph's order
        assert len(times) > len(kernels) and all(s > 0 for _, s in times)  # torch steps too
        # the profiled run computes the model: the classifier's output, a kernel's, lands in
        # the arena (cleared first)
        plan.arena[...] = 0
        plan.profile(x)
        fc = next(n for n in compiled.graph.nodes if n.op == "output").args[0][0]
        assert torch.allclose(plan._values[fc], model(x)[0], rtol=1e-4, atol=1e-5)
        with pytest.raises(ValueError, match="do not fit"):
            plan.profile(torch.randn(2, 3, 6, 6))


def test_tanh_approximated_gelu_stays_in_torch() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.GELU(approximate="tanh")).eval()
    found = autotune.extract(model, torch.randn(1, 3, 4, 4))
    assert [t.workload.epilogue for t in found.tasks] == [("bias",)]


class Dense(nn.Module):
    """A DenseNet block in small: each layer reads the concat of every feature before it
    (a prefix of the block's concat), the block returns the concat of all; beside it a
    concat of 3-channel convs (sizes not a multiple of 16 floats: a copy) and one that takes
    the model's input (not a kernel's output: a copy)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.layers = nn.ModuleList(nn.Sequential(nn.BatchNorm2d(16 * (i + 1)), nn.ReLU(),
                                                  nn.Conv2d(16 * (i + 1), 16, 3, padding=1))
                                    for i in range(3))
        self.small = nn.ModuleList(nn.Conv2d(3, 3, 1) for _ in range(2))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        features = [self.stem(x)]
        for layer in self.layers:
            features.append(layer(torch.cat(features, 1)))
        small = torch.cat([m(x) for m in self.small], 1)
        return torch.cat(features, 1), small, torch.cat([x, small], 1)


def _compile(model: nn.Module, x: torch.Tensor, layout: str) -> nn.Module:
    """``model`` compiled at ``x`` in ``layout`` (default schedules)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return autotune.compile_model(model, (x,), db=None, layout=layout)


def _randomized(model: nn.Module) -> nn.Module:
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1), m.running_var.uniform_(0.5, 2)
    return model.eval()


@pytest.mark.parametrize("layout", ["nchw", "auto"])
def test_channel_concats_of_kernel_outputs_are_written_in_place(layout: str) -> None:
    torch.manual_seed(0)
    model, x = _randomized(Dense()), torch.randn(1, 3, 5, 6)
    compiled = _compile(model, x, layout)
    plan = compiled.forward
    cats = [n for n in compiled.graph.nodes if n.target is torch.cat]
    block = max(cats, key=lambda c: len(c.args[0]))
    prefixes = [c for c in cats if c is not block and c.args[0] == block.args[0][:len(c.args[0])]]
    small, with_input = [c for c in cats if c is not block and c not in prefixes]
    assert len(prefixes) == 3 and with_input.args[0][0].op == "placeholder"
    # the block's concat and its prefixes are views of one buffer: no step copies them
    assert all(c in plan._values for c in (block, *prefixes))
    assert {plan._values[c].data_ptr() for c in (block, *prefixes)} == \
        {plan._values[block].data_ptr()}
    stem = block.args[0][0]
    assert plan._values[stem].data_ptr() == plan._values[block].data_ptr()
    # 3 channels of 5 x 6 (90 floats) would leave the next input unaligned; the input's
    # concat reads what no kernel writes: both stay torch steps
    assert small not in plan._values and with_input not in plan._values
    with torch.no_grad():
        want, got = model(x), compiled(x)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        first = [g.clone() for g in got]
        x2 = torch.randn(1, 3, 5, 6)
        for g, w in zip(compiled(x2), model(x2)):  # the arena again: the first results kept
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        assert all(torch.equal(a, b) for a, b in zip(got, first))
        x3 = torch.randn(2, 3, 5, 6)  # another batch: the graph's own code
        for g, w in zip(compiled(x3), model(x3)):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_a_batch_concat_is_a_copy() -> None:
    """Two images' channels are not one run of memory: the concat stays a torch step."""
    torch.manual_seed(0)
    model, x = _randomized(Dense()), torch.randn(2, 3, 5, 6)
    compiled = _compile(model, x, "nchw")
    cats = [n for n in compiled.graph.nodes if n.target is torch.cat]
    assert not any(c in compiled.forward._values for c in cats)
    with torch.no_grad():
        for g, w in zip(compiled(x), model(x)):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


class ChangedInPlace(nn.Module):
    """A concat whose input a torch op then changes in place: eager's concat is a copy made
    before the change, so the plan's must be too."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 16, 1), nn.Conv2d(3, 16, 1)
        self.c = nn.Conv2d(32, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.a(x)
        joined = torch.cat([a, self.b(x)], 1)
        a.mul_(2.0)
        return self.c(joined) + a.sum()


def test_a_concat_whose_input_a_torch_op_changes_is_a_copy() -> None:
    torch.manual_seed(0)
    model, x = ChangedInPlace().eval(), torch.randn(1, 3, 4, 4)
    compiled = _compile(model, x, "nchw")
    (cat,) = [n for n in compiled.graph.nodes if n.target is torch.cat]
    assert cat not in compiled.forward._values
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)


class Nested(nn.Module):
    """Inception's block end in small: a concat that takes a concat of two branches."""

    def __init__(self) -> None:
        super().__init__()
        self.branches = nn.ModuleList(nn.Conv2d(3, 16, 1) for _ in range(4))
        self.head = nn.Conv2d(64, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b, c, d = (m(x) for m in self.branches)
        inner = torch.cat([b, c], 1)
        return self.head(torch.cat([a, inner, d], 1))


def test_a_concat_of_a_concat_is_written_in_place_too() -> None:
    torch.manual_seed(0)
    model, x = Nested().eval(), torch.randn(1, 3, 4, 4)
    compiled = _compile(model, x, "nchw")
    plan = compiled.forward
    inner, outer = [n for n in compiled.graph.nodes if n.target is torch.cat]
    a, _, d = outer.args[0]
    b, c = inner.args[0]
    base = plan._values[outer].data_ptr()
    part = 16 * 4 * 4 * 4  # bytes of one branch's output
    assert [plan._values[n].data_ptr() - base for n in (a, inner, b, c, d)] == \
        [0, part, part, 2 * part, 3 * part]
    assert plan.runs == 1  # no torch step between the kernels
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


class Padded(nn.Module):
    """3x3 convs whose kernels pad their input into a workspace, a residual, a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 16, 3, padding=1)
        self.c2 = nn.Conv2d(16, 16, 3, padding=1)
        self.c3 = nn.Conv2d(16, 32, 3, padding=1, stride=2)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.c1(x))
        b = torch.relu(self.c2(a) + a)
        return self.fc(torch.relu(self.c3(b)).mean((2, 3)))


def test_kernel_workspaces_live_in_the_arena_and_are_written_before_read() -> None:
    """A planned call uses arena memory for each kernel's workspaces (the kernels' own stay
    as they were), and an arena full of NaN (what other layers leave there) changes nothing:
    a kernel writes its whole workspace before reading it."""
    torch.manual_seed(0)
    model, x = Padded().eval(), torch.randn(1, 3, 14, 14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = autotune.compile_model(model, (x,), db=None)
    plan = compiled.forward
    assert isinstance(plan, ModelPlan)
    owned = [w for m in kernel_modules(compiled) for w in m.kernel.workspaces]
    assert owned, "the 3x3 convs' default configs pad their input in a workspace"
    for w in owned:
        w.fill(7.0)
    with torch.no_grad():
        want = model(x)
        for _ in range(2):
            plan.arena.fill(np.nan)
            torch.testing.assert_close(compiled(x), want, rtol=1e-4, atol=1e-5)
    assert all((w == 7.0).all() for w in owned)
