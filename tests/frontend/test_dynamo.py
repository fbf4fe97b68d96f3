"""``torch.compile(model, backend="autotune")``: dynamo's functional graph, its weights as
inputs, runs on autotune's kernels (convs with their batch norms folded, residual adds and
ReLUs fused, linear layers) and matches eager; the ops autotune has no kernel for run as
partitions compiled by inductor (a real C++ compile: seconds)."""
from __future__ import annotations

import warnings
from typing import Any, Iterator

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from autotune.frontend.dynamo import autotune_backend  # noqa: E402
from autotune.frontend.inductor import InductorPartition, InductorWarning  # noqa: E402
from autotune.frontend.plan import ModelPlan  # noqa: E402
from autotune.frontend.runtime import kernel_modules  # noqa: E402
from tests.frontend.frontend_nets import (  # noqa: E402
    PaddableNet,
    TinyMobileNet,
    TinyResNet,
    randomize_bn,
)


class ShuffleNet(nn.Module):
    """Two conv branches joined by a concatenation (run blocked, on torch), then ops
    autotune has no kernel for: a channel shuffle (batch-size agnostic) and a GELU; then a
    conv and a global pool."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU())
        self.left, self.right = nn.Conv2d(8, 8, 1), nn.Conv2d(8, 8, 3, 1, 1)
        self.head = nn.Conv2d(16, 16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        y = torch.cat([self.left(x), self.right(x)], 1)
        y = y.unflatten(1, (2, -1)).transpose(1, 2).flatten(1, 2)
        return self.head(nn.functional.gelu(y)).mean((2, 3))


@pytest.fixture
def inductor_cache(tmp_path: Any) -> Iterator[None]:
    """Inductor's caches in the test's own directory: nothing left in the user's, no two
    xdist workers on one, and a cold compile (no artifact of another test reused)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
        yield


def compiled_graph(model: nn.Module, x: torch.Tensor, **options: Any
                   ) -> tuple[Any, torch.Tensor, list[Any]]:
    """``torch.compile(model, backend="autotune", options=...)`` called once on ``x``
    (no autograd): the compiled graph module, its output, and dynamo's example inputs."""
    graphs: list[Any] = []

    def backend(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
        graphs.append((autotune_backend(gm, example_inputs, **kwargs), list(example_inputs)))
        return graphs[-1][0]

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, options={"db": None, **options})
    with warnings.catch_warnings(), torch.no_grad():
        warnings.filterwarnings("ignore", message=".*tuned.*")  # default schedules: no db
        got = compiled(x)
    ((gm, example_inputs),) = graphs
    return gm, got, example_inputs


def partitions(gm: nn.Module) -> list[InductorPartition]:
    return [m for m in gm.modules() if isinstance(m, InductorPartition)]


def close(got: torch.Tensor, want: torch.Tensor) -> bool:
    return torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


@pytest.mark.parametrize("net", [TinyResNet, TinyMobileNet])
def test_the_backend_runs_the_model_on_kernels(net) -> None:
    torch.manual_seed(0)
    model, x = randomize_bn(net()), torch.randn(1, 3, 32, 32)
    graphs = []

    def backend(gm, example_inputs, **kwargs):
        graphs.append(autotune_backend(gm, example_inputs, **kwargs))
        return graphs[-1]

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, options={"db": None})
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        got, want = compiled(x), model(x)
    assert torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
    (gm,) = graphs
    kinds = [m.kind for m in kernel_modules(gm)]
    assert kinds.count("conv") >= 5 and "linear" in kinds  # every conv and the classifier
    # eval-mode dropout (TinyMobileNet's classifier) is taken out, not left a torch step
    assert not [n for n in gm.graph.nodes if "dropout" in str(n.target)]
    assert "residual" in {s for m in kernel_modules(gm) for s in m.workload.epilogue}
    assert isinstance(gm.forward, ModelPlan)
    with pytest.raises(ValueError, match="unknown options"):
        autotune_backend(gm, [x], options={"dbb": None})


def test_the_backend_is_registered_by_name() -> None:
    assert "autotune" in torch._dynamo.list_backends()


def test_the_backend_hands_the_ops_without_kernels_to_inductor(inductor_cache: None) -> None:
    torch.manual_seed(0)
    model, x = randomize_bn(ShuffleNet()), torch.randn(1, 3, 8, 8)
    gm, got, example_inputs = compiled_graph(model, x)
    with torch.no_grad():
        assert close(got, model(x))
    (part,) = partitions(gm)
    assert part.compiled is not None
    ops = {getattr(n.target, "__name__", n.target) for n in part.graph.graph.nodes}
    assert {"transpose", "gelu"} <= ops
    # the graph itself keeps no other torch op than the concat, of the two branches'
    # blocked outputs (it runs blocked: `layouts.blocked_concats`)
    assert [n.target for n in gm.graph.nodes if n.op not in
            ("placeholder", "call_module", "output")] == [torch.cat]
    assert isinstance(gm.forward, ModelPlan) and gm.forward.kernels >= 4

    # which path each call of the partition takes: inductor's code on the planned call,
    # the partition's ops on a batch of 2 (the graph's own code, kernels on torch too)
    fitted: list[bool] = []
    part.register_forward_pre_hook(lambda m, args: fitted.append(m.fits(args)))
    x2 = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        (planned,) = gm(*example_inputs)
        (other,) = gm(*[x2 if a is x else a for a in example_inputs])
        assert close(planned, model(x)) and close(other, model(x2))
    assert fitted == [True, False]


def test_rest_eager_leaves_the_ops_to_torch() -> None:
    torch.manual_seed(0)
    model, x = randomize_bn(ShuffleNet()), torch.randn(1, 3, 8, 8)
    gm, got, _ = compiled_graph(model, x, rest="eager")
    with torch.no_grad():
        assert close(got, model(x))
    assert not partitions(gm)
    assert torch.cat in {n.target for n in gm.graph.nodes}
    with pytest.raises(ValueError, match="rest: .* not 'fast'"):
        autotune_backend(gm, [x], options={"rest": "fast"})


def test_a_partition_inductor_fails_on_runs_eagerly(inductor_cache: None) -> None:
    torch.manual_seed(0)
    model, x = randomize_bn(ShuffleNet()), torch.randn(1, 3, 6, 6)
    with torch._inductor.config.patch({"cpp.cxx": (None, "/nonexistent/g++")}), \
            pytest.warns(InductorWarning, match="autotune_inductor_0 .* runs eagerly") as caught:
        gm, got, _ = compiled_graph(model, x)
    assert len([w for w in caught if w.category is InductorWarning]) == 1
    with torch.no_grad():
        assert close(got, model(x))
    (part,) = partitions(gm)
    assert part.compiled is None


class InplaceActs(nn.Module):
    """Activations called as torchvision calls them, ``inplace`` given: dynamo's graph keeps
    the flag as an argument (``hardswish(x, True)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.hardswish(self.a(x), inplace=True)
        return nn.functional.hardsigmoid(self.b(y), False)


def test_activations_with_an_inplace_flag_are_fused() -> None:
    torch.manual_seed(0)
    model, x = InplaceActs().eval(), torch.randn(1, 3, 8, 8)
    gm, got, _ = compiled_graph(model, x, rest="eager")
    with torch.no_grad():
        assert close(got, model(x))
    assert sorted(m.activation for m in kernel_modules(gm)) == ["hardsigmoid", "hardswish"]
    assert gm.forward.runs == 1  # no torch step between the kernels


def test_the_backend_pads_channel_groups_as_compile_model_does() -> None:
    """Dynamo's graph (its convs made modules again) gets the same channel padding: 60
    channels run as 64 on 8 or 16 lanes, and the model still matches eager."""
    model, x = randomize_bn(PaddableNet(60)), torch.randn(1, 3, 12, 12)
    gm, got, _ = compiled_graph(model, x, rest="eager")
    widths = {m.workload.dim("K") for m in kernel_modules(gm) if m.workload.op == "conv2d"}
    assert 64 in widths and 60 not in widths
    with torch.no_grad():
        assert close(got, model(x))
