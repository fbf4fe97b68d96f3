"""On a GPU host (marker ``cuda_device``; scripts/gpu-check.sh runs them): a compiled model
on CUDA tensors captures one CUDA graph of autotune's kernels and torch's operators, replays
it without running a module's Python, matches torch on new inputs and on another stream;
a forward that syncs with the host warns and runs eagerly. Without a GPU,
tests/frontend/test_cuda_graphs.py checks the same logic with a stand-in driver."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import autotune  # noqa: E402
from autotune.frontend.cuda_graphs import CudaGraphModel, CudaGraphWarning  # noqa: E402
from autotune.frontend.cuda_runtime import CudaKernelModule  # noqa: E402
from tests.frontend.frontend_nets import TinyMobileNet, TinyResNet, randomize_bn  # noqa: E402

TOL = {torch.float32: 1e-4, torch.float16: 5e-3}


@pytest.fixture
def arch(nvcc, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("torch finds no CUDA device")
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    major, minor = torch.cuda.get_device_capability()
    return autotune.Target(f"cuda -arch=sm_{major}{minor}")


def _compile(model, x, tgt):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return autotune.compile_model(model, x, target=tgt, db=None)


def _close(got, want, dtype):
    err = ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()
    assert err < TOL[dtype], f"max error {err:.2e} relative to the largest output"


@pytest.mark.cuda_device
@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("net", [TinyResNet, TinyMobileNet])
def test_a_compiled_model_replays_one_graph_and_matches_torch(net, dtype, arch, monkeypatch):
    torch.manual_seed(0)
    model = randomize_bn(net()).to("cuda", dtype)
    x = torch.randn(1, 3, 32, 32, device="cuda", dtype=dtype)
    compiled = _compile(model, x, arch)
    assert isinstance(compiled, CudaGraphModel)
    calls = []
    forward = CudaKernelModule.forward
    monkeypatch.setattr(CudaKernelModule, "forward",
                        lambda self, *xs: (calls.append(self.place), forward(self, *xs))[1])
    with torch.no_grad():
        got = compiled(x)  # warm-up, capture, replay
        kernels = len(calls)
        assert kernels > 0
        _close(got, model(x), dtype)
        x2 = torch.randn_like(x)
        got2 = compiled(x2)
        assert len(calls) == kernels  # a replay: no module's Python ran
        _close(got2, model(x2), dtype)
        _close(got, model(x), dtype)  # returned outputs are copies, not the static buffer
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            x3 = x * 0.5
            got3 = compiled(x3)
            want3 = model(x3)
        side.synchronize()
        _close(got3, want3, dtype)
    assert len(calls) == kernels


class _Syncs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = randomize_bn(TinyResNet())

    def forward(self, x):
        y = self.net(x)
        return y * (y.abs().max().item() > 0)  # a host sync: not capturable


@pytest.mark.cuda_device
def test_a_forward_that_syncs_with_the_host_runs_eagerly(arch):
    torch.manual_seed(0)
    model, x = _Syncs().eval().cuda(), torch.randn(1, 3, 32, 32, device="cuda")
    compiled = _compile(model, x, arch)
    with torch.no_grad():
        with pytest.warns(CudaGraphWarning):
            got = compiled(x)
        _close(got, model(x), torch.float32)
        _close(compiled(x), model(x), torch.float32)
