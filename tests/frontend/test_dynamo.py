"""``torch.compile(model, backend="autotune")``: dynamo's functional graph, its weights as
inputs, runs on autotune's kernels (convs with their batch norms folded, residual adds and
ReLUs fused, linear layers) and matches eager."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from autotune.frontend.dynamo import autotune_backend  # noqa: E402
from autotune.frontend.plan import ModelPlan  # noqa: E402
from autotune.frontend.runtime import kernel_modules  # noqa: E402
from tests.frontend.frontend_nets import TinyMobileNet, TinyResNet, randomize_bn  # noqa: E402


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
    assert "residual" in {s for m in kernel_modules(gm) for s in m.workload.epilogue}
    assert isinstance(gm.forward, ModelPlan)
    with pytest.raises(ValueError, match="unknown options"):
        autotune_backend(gm, [x], options={"dbb": None})


def test_the_backend_is_registered_by_name() -> None:
    assert "autotune" in torch._dynamo.list_backends()
