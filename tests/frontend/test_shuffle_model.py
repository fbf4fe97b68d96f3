"""ShuffleNet's units compiled (llvm): the concat and channel shuffle as one channel_shuffle
kernel reading the parts, the chunk that splits a unit's input as views of the kernel's
output (blocked as well where the block divides the halves), the whole model in one native
run; and what is not a shuffle of a concat left to torch."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import autotune  # noqa: E402
from autotune.frontend.plan import ModelPlan  # noqa: E402
from autotune.frontend.runtime import kernel_modules  # noqa: E402


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """torchvision's: sizes read from the tensor, a view, a transpose and a view."""
    n, c, h, w = x.size()
    x = x.view(n, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(n, -1, h, w)


def _bn(c: int) -> nn.BatchNorm2d:
    bn = nn.BatchNorm2d(c).eval()
    with torch.no_grad():  # statistics of their own, so that a wrong channel shows
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    return bn


class Unit(nn.Module):
    """A stride-1 ShuffleNet-V2 unit: half the channels pass, half go through a branch."""

    def __init__(self, c: int) -> None:
        super().__init__()
        h = c // 2
        self.branch = nn.Sequential(
            nn.Conv2d(h, h, 1, bias=False), _bn(h), nn.ReLU(),
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), _bn(h),
            nn.Conv2d(h, h, 1, bias=False), _bn(h), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=1)
        return channel_shuffle(torch.cat((x1, self.branch(x2)), dim=1), 2)


class Net(nn.Module):
    """A stem, a unit whose both halves are new (stride 2's form), two stride-1 units, and
    nn.ChannelShuffle of a three-way concat."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c // 2, 3, padding=1), nn.ReLU())
        self.left = nn.Conv2d(c // 2, c // 2, 1)
        self.right = nn.Conv2d(c // 2, c // 2, 3, padding=1)
        self.units = nn.Sequential(Unit(c), Unit(c))
        self.three = nn.ModuleList(nn.Conv2d(c, c, 1) for _ in range(3))
        self.shuffle = nn.ChannelShuffle(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = channel_shuffle(torch.cat((self.left(x), self.right(x)), 1), 2)
        x = self.units(x)
        return self.shuffle(torch.cat([conv(x) for conv in self.three], 1))


def _compiled(model: nn.Module, x: torch.Tensor, layout: str) -> torch.fx.GraphModule:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no records: default configs
        return autotune.compile_model(model, x, db=None, layout=layout)


@pytest.mark.parametrize("layout", ["nchw", "auto"])
def test_shuffles_are_kernels_and_the_model_one_native_run(layout: str) -> None:
    torch.manual_seed(0)
    model = Net(64).eval()
    x = torch.randn(1, 3, 8, 8)  # halves of 32 x 64 floats: aligned views
    fast = _compiled(model, x, layout)
    with torch.no_grad():
        expected, got = model(x), fast(x)
    assert (got - expected).abs().max() <= 1e-4 * expected.abs().max()
    shuffles = [k for k in kernel_modules(fast) if k.workload.op == "channel_shuffle"]
    assert [k.workload.dim("groups") for k in shuffles] == [2, 2, 2, 3]
    if layout == "auto":
        assert all(k.workload.block > 1 for k in shuffles[:3])
    graph = [str(n.target) for n in fast.graph.nodes]
    assert not any(name in graph for name in ("<built-in method cat of type object at",
                                              "transpose", "contiguous", "size"))
    plan = fast.forward
    assert isinstance(plan, ModelPlan) and plan.runs == 1
    # the chunks are views: no torch step but the output's return to NCHW
    steps = [str(s.target) for s in plan._steps if isinstance(s, torch.fx.Node)]
    assert steps == ([] if layout == "nchw" else ["autotune_layout_0"])
    with torch.no_grad():  # and again: the plan's buffers reused
        assert torch.equal(fast(x), got)


def test_a_misaligned_half_is_copied_and_a_batch_matches() -> None:
    torch.manual_seed(1)
    model = Net(24).eval()  # halves of 12 x 25 floats: not aligned, a copy
    for x in (torch.randn(1, 3, 5, 5), torch.randn(2, 3, 5, 5)):
        fast = _compiled(model, x, "auto")
        with torch.no_grad():
            expected, got = model(x), fast(x)
        assert (got - expected).abs().max() <= 1e-4 * expected.abs().max()


class Kept(nn.Module):
    """A concat read twice, and a shuffle of one tensor: neither is a shuffle kernel."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Conv2d(3, 8, 1), nn.Conv2d(3, 8, 1), nn.Conv2d(3, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cat = torch.cat((self.a(x), self.b(x)), 1)
        return channel_shuffle(cat, 2) + cat + channel_shuffle(self.c(x), 4)


def test_a_concat_read_elsewhere_stays_in_torch() -> None:
    model = Kept().eval()
    x = torch.randn(1, 3, 6, 6)
    fast = _compiled(model, x, "nchw")
    assert not [k for k in kernel_modules(fast) if k.workload.op == "channel_shuffle"]
    with torch.no_grad():
        assert torch.allclose(fast(x), model(x), atol=1e-5)


class Splits(nn.Module):
    """Splits along channels of a blocked tensor: by keyword, with a negative dim, into
    unequal sections, and one whose tuple is read whole (by a concat)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 64, 1)
        self.b, self.c = nn.Conv2d(32, 32, 1), nn.Conv2d(48, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        p, q = y.chunk(chunks=2, dim=-3)
        r, s = torch.split(y, [48, 16], dim=1)
        whole = torch.cat(y.chunk(4, 1)[::-1], 1)
        return self.b(p) + self.b(q) + torch.cat((self.c(r), s, self.c(r), s), 1)[:, :32] + \
            whole[:, :32]


def test_splits_in_every_form_match_eager_blocked() -> None:
    model = Splits().eval()
    x = torch.randn(1, 3, 8, 8)
    fast = _compiled(model, x, "auto")
    with torch.no_grad():
        assert torch.allclose(fast(x), model(x), atol=1e-5)
