"""Self-attention's projections run as matmul kernels; attention that means something else
(masks, cross-attention, its weights read) stays one torch call, and every model still
matches eager."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import fx, nn  # noqa: E402

import autotune  # noqa: E402
from autotune.frontend.attention import split_attention  # noqa: E402

E, HEADS, L, N = 32, 4, 10, 2


class Block(nn.Module):
    """A pre-norm encoder block's attention half, as ViT's, with a choice of call."""

    def __init__(self, batch_first: bool = True, how: str = "plain") -> None:
        super().__init__()
        self.ln = nn.LayerNorm(E)
        self.att = nn.MultiheadAttention(E, HEADS, batch_first=batch_first)
        self.fc = nn.Linear(E, 2 * E)
        self.how = how

    def forward(self, x: torch.Tensor):
        y = self.ln(x)
        if self.how == "plain":
            a, _ = self.att(y, y, y, need_weights=False)
        elif self.how == "weights kept":  # the default need_weights, the weights unread
            a = self.att(y, y, y)[0]
        elif self.how == "mask":
            mask = torch.ones(L, L, dtype=torch.bool).triu(1)
            a, _ = self.att(y, y, y, attn_mask=mask, need_weights=False)
        elif self.how == "cross":
            a, _ = self.att(y, x, x, need_weights=False)
        else:  # the attention weights are read
            a, w = self.att(y, y, y)
            return self.fc(x + a), w
        return self.fc(x + a)


def _input(batch_first: bool) -> torch.Tensor:
    torch.manual_seed(0)
    return torch.randn(N, L, E) if batch_first else torch.randn(L, N, E)


def _check(model: nn.Module, x: torch.Tensor) -> list[str]:
    """The model's matmul workloads; its compiled model matches eager."""
    model.eval()
    tasks = autotune.extract(model, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no records: default configs
        compiled = autotune.compile_model(model, x)
    with torch.no_grad():
        want, got = model(x), compiled(x)
    for w, g in zip(want if isinstance(want, tuple) else (want,),
                    got if isinstance(got, tuple) else (got,)):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    return [str(t.workload) for t in tasks.tasks]


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("how", ["plain", "weights kept"])
def test_self_attention_projections_run_as_matmul_kernels(batch_first: bool, how: str) -> None:
    workloads = _check(Block(batch_first, how), _input(batch_first))
    # the input projection (E -> 3E) and the output one (E -> E, the block's x + a fused as
    # its residual), beside the block's fc
    assert f"matmul(M={N * L},N={3 * E},K={E})+bias prepacked" in workloads
    assert f"matmul(M={N * L},N={E},K={E})+bias+residual prepacked" in workloads


@pytest.mark.parametrize("how", ["mask", "cross", "weights read"])
def test_other_attention_stays_one_torch_call(how: str) -> None:
    model = Block(True, how)
    workloads = _check(model, _input(True))
    assert workloads == [f"matmul(M={N * L},N={2 * E},K={E})+bias prepacked"]
    gm = fx.symbolic_trace(model.eval())
    assert split_attention(gm) == 0


def test_split_counts_each_call_and_keeps_the_module_weights() -> None:
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = Block(), Block()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x)[..., :E])

    model = Two().eval()
    gm = fx.symbolic_trace(model)
    assert split_attention(gm) == 2
    proj = gm.get_submodule("a.att.autotune_in_proj")
    assert proj.weight is model.a.att.in_proj_weight and proj.bias is model.a.att.in_proj_bias
    x = _input(True)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("batch_first", [True, False])
def test_torch_compile_backend_splits_the_attention_dynamo_traced_into(batch_first: bool
                                                                       ) -> None:
    """dynamo records F.multi_head_attention_forward with the weights as graph inputs:
    modularize gives both projections modules (matmul kernels) and matches eager."""
    import torch._dynamo

    from autotune.frontend.dynamo import modularize

    model, x = Block(batch_first).eval(), _input(batch_first)
    graphs = []

    def backend(gm, example_inputs):
        count = modularize(gm, example_inputs)
        graphs.append((gm, count))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(model, backend=backend)(x)
        torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    (gm, count), = graphs
    assert count == 3  # the in- and out-projections and the block's fc
    assert not any(n.target is torch.nn.functional.multi_head_attention_forward
                   for n in gm.graph.nodes)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = torch.compile(model, backend="autotune")
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


class Mlp(nn.Module):
    """A transformer's MLP half: x + fc2(gelu(fc1(x))), on (N, L, E) tokens."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(E, 4 * E), nn.Linear(4 * E, E)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(nn.functional.gelu(self.fc1(x)))


def test_a_linear_takes_the_add_after_it_as_its_residual() -> None:
    """x + fc2(...) is one kernel (matmul + bias + residual, the tokens flattened to rows);
    it matches eager through the plan and through the module's copying path (inputs the
    kernel cannot take in place: misaligned)."""
    from autotune.frontend.runtime import kernel_modules

    model, x = Mlp().eval(), _input(True)
    workloads = _check(model, x)
    assert workloads == [f"matmul(M={N * L},N={4 * E},K={E})+bias+gelu prepacked",
                         f"matmul(M={N * L},N={E},K={4 * E})+bias+residual prepacked"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = autotune.compile_model(model, x)
    fc2 = [m for m in kernel_modules(compiled) if "residual" in m.workload.epilogue]
    assert len(fc2) == 1
    h = torch.randn(N, L, 4 * E)
    misaligned = torch.empty(x.numel() + 1)[1:].view(x.shape).copy_(x)
    with torch.no_grad():
        want = x + model.fc2(h)
        torch.testing.assert_close(fc2[0](h, misaligned), want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fc2[0](h, x), want, rtol=1e-5, atol=1e-5)
