"""Channel padding: channel groups that leave part of a vector get zero channels, only where
every op that makes or reads them allows, and the padded graph computes what the model does."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import autotune  # noqa: E402
from autotune.frontend.padding import pad_channels  # noqa: E402
from autotune.frontend.runtime import plan_model  # noqa: E402
from autotune.frontend.torch import extract, trace  # noqa: E402
from tests.frontend.frontend_nets import PaddableNet, randomize_bn  # noqa: E402


def _padded(model: nn.Module, lanes: int = 16) -> tuple[int, torch.nn.Module, torch.Tensor]:
    x = torch.randn(1, 3, 12, 12)
    gm = trace(model, (x,))
    return pad_channels(gm, (x,), lanes), gm, x


def test_a_group_of_40_channels_is_padded_to_48_and_computes_the_same() -> None:
    model = randomize_bn(PaddableNet(40))
    n, gm, x = _padded(model)
    assert n == 1
    assert gm.stem.out_channels == 48 and gm.dw.groups == 48 and gm.bn.num_features == 48
    assert gm.squeeze.in_channels == 48 and gm.excite.out_channels == 48
    assert gm.project.in_channels == 48 and gm.project.out_channels == 32  # blocked already
    assert model.stem.out_channels == 40  # the caller's model is left as it was
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x), rtol=1e-5, atol=1e-5)


def test_groups_a_vector_holds_or_that_would_grow_too_much_stay() -> None:
    assert _padded(randomize_bn(PaddableNet(48)))[0] == 0  # 3 vectors already
    assert _padded(randomize_bn(PaddableNet(24)))[0] == 0  # 24 -> 32: a third more work
    assert _padded(randomize_bn(PaddableNet(40)), lanes=8)[0] == 0  # 5 vectors of 8


def test_a_group_a_concat_reads_stays() -> None:
    model = randomize_bn(PaddableNet(40, tail="concat"))
    n, gm, x = _padded(model)
    assert n == 0 and gm.stem.out_channels == 40


def test_a_padded_tensor_the_model_returns_is_narrowed_back() -> None:
    model = randomize_bn(PaddableNet(40, tail="output"))
    n, gm, x = _padded(model)
    assert n == 1 and gm.stem.out_channels == 48
    with torch.no_grad():
        got, want = gm(x), model(x)
    assert got.shape == want.shape == (1, 40, 12, 12) and got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_group_read_by_a_conv_into_unblocked_channels_stays() -> None:
    # 40 -> 20 channels: a blocked 40 (48) read into NCHW would need a layout change in torch
    model = randomize_bn(PaddableNet(40, out=20))
    assert _padded(model)[0] == 0


def test_a_shared_module_keeps_its_channels() -> None:
    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Conv2d(3, 40, 1)
            self.b = nn.Conv2d(40, 40, 1)
            self.c = nn.Conv2d(40, 32, 1)

        def forward(self, x):
            return self.c(self.b(self.b(self.a(x))))

    n, gm, _ = _padded(Shared().eval())
    assert n == 0 and gm.b.in_channels == 40


def test_compiled_models_run_padded_groups_and_match_eager() -> None:
    """60 channels leave part of a vector on every host (8 or 16 lanes): the compiled model
    and its tasks (what tune_model tunes) both have the padded workloads, and it matches
    eager."""
    model = randomize_bn(PaddableNet(60))
    x = torch.randn(1, 3, 12, 12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no tuned schedules: the defaults
        planned = plan_model(model, (x,), db=None)
        tasks = extract(model, (x,))
        compiled = autotune.compile_model(model, (x,), db=None)
        layout_free = plan_model(model, (x,), db=None, layout="nchw")  # only blocked pads
    convs = [p.workload for p in planned if p.workload.op == "conv2d"]
    assert any(wl.dim("K") == 64 for wl in convs) and all(wl.dim("K") != 60 for wl in convs)
    assert {t.workload for t in tasks.tasks} == {p.workload for p in planned}
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert all(p.workload.dim("K") != 64 for p in layout_free if p.workload.op == "conv2d")


def test_a_mean_over_channels_keeps_them() -> None:
    """A mean over channels and rows of a 40 x 12 x 40 tensor is [N, 40] too, but the
    padded channels would count in it."""
    class ChannelMean(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Conv2d(3, 40, 1)
            self.fc = nn.Linear(40, 10)

        def forward(self, x):
            return self.fc(self.a(x).mean((1, 2)))

    model = ChannelMean().eval()
    x = torch.randn(1, 3, 12, 40)
    gm = trace(model, (x,))
    assert pad_channels(gm, (x,), 16) == 0 and gm.a.out_channels == 40
