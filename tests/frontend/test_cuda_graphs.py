"""`CudaGraphModel`: which calls capture, replay or run eagerly, the static buffers, copies
of the outputs, a failed capture, dropped graphs, and `compile_model`'s choice, checked with
a stand-in driver on this host's CPU tensors (a CUDA graph needs a GPU: the device tests are
in tests/cuda/test_cuda_graphs_device.py)."""
from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")

import autotune  # noqa: E402
from autotune.frontend.cuda_graphs import MAX_GRAPHS, CudaGraphModel, CudaGraphWarning  # noqa: E402
from autotune.frontend.runtime import kernel_modules  # noqa: E402
from tests.frontend.frontend_nets import TinyResNet, randomize_bn  # noqa: E402


class StandIn:
    """Captures on CPU tensors: the capture runs the call (after a warm-up run), and a
    replay runs it again, writing the captured output's memory, as a graph's replay does."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.captures = self.replays = self.runs = 0

    def capturable(self, xs):
        return all(isinstance(x, torch.Tensor) and x.device.type == "cpu" for x in xs)

    def capture(self, run, device):
        self.captures += 1
        run()  # the warm-up
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        out = run()

        def replay():
            self.replays += 1
            out.copy_(run())

        return replay, out


class Counted(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return torch.relu(self.lin(x))


def _model(fail: bool = False):
    torch.manual_seed(0)
    inner = Counted().eval()
    return inner, CudaGraphModel(inner, StandIn(fail))


def test_the_first_call_captures_and_later_calls_replay_on_static_inputs():
    inner, graphed = _model()
    x1, x2 = torch.randn(2, 4), torch.randn(2, 4)
    with torch.no_grad():
        out1 = graphed(x1)  # warm-up, capture (which computes nothing on a GPU), replay
        assert graphed.driver.captures == graphed.driver.replays == 1 and inner.calls == 3
        torch.testing.assert_close(out1, inner(x1))
        out2 = graphed(x2)  # the replay reads x2, copied into the static input
        assert graphed.driver.captures == 1 and graphed.driver.replays == 2
        torch.testing.assert_close(out2, inner(x2))
        torch.testing.assert_close(out1, inner(x1))  # a copy: the replay did not touch it
        graphed(torch.randn(5, 4))  # another shape: a graph of its own
    assert graphed.driver.captures == 2


def test_calls_with_autograd_or_other_devices_run_eagerly():
    inner, graphed = _model()
    x = torch.randn(2, 4)
    want = inner(x)
    torch.testing.assert_close(graphed(x), want)  # grad mode: eager
    assert graphed.driver.captures == 0
    with torch.no_grad():
        graphed(x)
    assert graphed.driver.captures == graphed.driver.replays == 1
    graphed.driver.capturable = lambda xs: False  # e.g. CUDA calls inside a capture
    with torch.no_grad():
        torch.testing.assert_close(graphed(x), want)
    assert graphed.driver.replays == 1


def test_a_call_that_cannot_be_captured_warns_once_and_runs_eagerly():
    inner, graphed = _model(fail=True)
    x = torch.randn(2, 4)
    with torch.no_grad():
        with pytest.warns(CudaGraphWarning, match="could not be captured"):
            torch.testing.assert_close(graphed(x), inner(x))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            torch.testing.assert_close(graphed(x), inner(x))
    assert graphed.driver.captures == 1


def test_moving_or_copying_the_model_drops_its_graphs():
    inner, graphed = _model()
    x = torch.randn(2, 4)
    with torch.no_grad():
        graphed(x)
        twin = copy.deepcopy(graphed)
        assert twin._graphs == {} and graphed._graphs
        graphed.to(torch.float64)
        assert graphed._graphs == {}
        graphed(x.double())
    assert graphed.driver.captures == 2


def test_signatures_past_the_cap_run_eagerly():
    _, graphed = _model()
    with torch.no_grad():
        for n in range(1, MAX_GRAPHS + 3):
            graphed(torch.randn(n, 4))
    assert graphed.driver.captures == MAX_GRAPHS


def test_compile_model_graphs_cuda_models_only(nvcc):
    torch.manual_seed(0)
    model, x = randomize_bn(TinyResNet()), torch.randn(1, 3, 32, 32)
    cuda = autotune.Target("cuda -arch=sm_90")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = autotune.compile_model(model, x, target=cuda, db=None)  # CPU inputs: off
        graphed = autotune.compile_model(model, x, target=cuda, db=None, cuda_graphs=True)
    assert not isinstance(plain, CudaGraphModel) and isinstance(graphed, CudaGraphModel)
    assert len(kernel_modules(graphed)) == len(kernel_modules(plain)) > 0
    with torch.no_grad():  # CPU tensors: eager, on torch
        torch.testing.assert_close(graphed(x), model(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="cuda_graphs is for cuda targets"):
        autotune.compile_model(model, x, target="llvm", db=None, cuda_graphs=True)


@pytest.fixture
def nvcc():
    from autotune.codegen.cuda.nvcc import find_nvcc
    if find_nvcc() is None:
        pytest.skip("nvcc not found: the CUDA compile check is skipped")
