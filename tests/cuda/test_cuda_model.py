"""Whole models on a CUDA target: the plan of kernels, every kernel of a tiny net through
nvcc, the errors of a host without a GPU; on a GPU host (marker ``cuda_device``) the compiled
model against torch on torch's CUDA tensors."""
from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import autotune  # noqa: E402
from autotune import cli  # noqa: E402
from autotune.api import NoTunedScheduleWarning  # noqa: E402
from autotune.codegen.cuda.runtime import NoCudaDevice  # noqa: E402
from autotune.frontend.cuda_runtime import CudaKernelModule  # noqa: E402
from autotune.frontend.runtime import kernel_modules, plan_model  # noqa: E402
from autotune.measure import MeasureUnavailable  # noqa: E402
from autotune.measure.capability import why_not_measurable  # noqa: E402
from tests.cuda.cuda_cases import target  # noqa: E402
from tests.frontend.frontend_nets import TinyMobileNet, TinyResNet, randomize_bn  # noqa: E402

NETS = {"resnet": TinyResNet, "mobilenet": TinyMobileNet}


def tiny_net() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    """A model spec for the CLI: TinyMobileNet (convs, depthwise, ReLU6, linear)."""
    torch.manual_seed(0)
    return randomize_bn(TinyMobileNet()), (torch.randn(1, 3, 32, 32),)


def _net(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return randomize_bn(NETS[name]()), torch.randn(1, 3, 32, 32)


def _compile(model, x, tgt=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoTunedScheduleWarning)
        return autotune.compile_model(model, x, target=tgt or target(), db=None)


def test_plan_model_lists_each_kernel_with_its_config():
    model, x = _net("mobilenet")
    with pytest.warns(NoTunedScheduleWarning):
        plan = plan_model(model, x, target=target(), db=None)
    tasks = autotune.extract(model, x, target=target()).tasks
    assert {k.workload for k in plan} == {t.workload for t in tasks}
    assert sum(len(k.places) for k in plan) == sum(t.weight for t in tasks)
    assert {k.workload.op for k in plan} == {"conv2d", "depthwise_conv2d", "matmul"}
    for k in plan:  # no records: the CUDA template's default, a valid point of its space
        space = autotune.config_space(k.workload, target())
        assert k.config.index == space.default().index
        assert space.invalid_reason(k.config) is None


@pytest.mark.parametrize("name", list(NETS))
def test_every_kernel_of_a_tiny_net_runs_right_in_the_execution_model(name):
    """What a compiled model would launch on the GPU, run without one: each planned kernel
    (workload and config) through `autotune.simulate_cuda`."""
    model, x = _net(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoTunedScheduleWarning)
        plan = plan_model(model, x, target=target(), db=None)
    assert plan
    for k in plan:
        assert autotune.simulate_cuda(k.workload, k.config, target()) < 1e-4, k.workload


@pytest.mark.parametrize("name", list(NETS))
def test_compile_model_builds_every_kernel_with_nvcc(name, nvcc):
    model, x = _net(name)
    compiled = _compile(model, x)
    mods = kernel_modules(compiled)
    assert mods and all(isinstance(m, CudaKernelModule) for m in mods)
    assert len(mods) == sum(t.weight for t in autotune.extract(model, x, target=target()).tasks)
    with pytest.warns(NoTunedScheduleWarning):
        plan = {k.workload: k.config for k in plan_model(model, x, target=target(), db=None)}
    for m in mods:
        assert m.kernel.binary[:4] == b"\x7fELF"  # a cubin for sm_90
        assert "void __launch_bounds__" in m.kernel.source and m.kernel.entry in m.kernel.source
        assert m.kernel.func.attrs["config_index"] == plan[m.workload].index
        assert all(p.device.type == "cpu" for p in m.torch_params())  # example inputs' device
    # CPU tensors run the folded groups on torch: the same model, in a copy too
    with torch.no_grad():
        want = model(x)
        torch.testing.assert_close(compiled(x), want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(copy.deepcopy(compiled)(x), want, rtol=1e-4, atol=1e-4)


def test_launching_without_a_gpu_says_why(nvcc):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the no-device error cannot be observed")
    model, x = _net("resnet")
    mod = kernel_modules(_compile(model, x))[0]
    n = len(mod.kernel.func.args)
    with pytest.raises(NoCudaDevice, match="no CUDA device is present: "):
        mod.launcher(0).launch([0] * n, 0)
    with pytest.raises(TypeError, match=f"takes {n} device pointers"):
        mod.launcher(0).launch([0] * (n + 1), 0)


def test_tune_model_on_a_host_without_the_gpu_fails_before_measuring(tmp_path: Path, capsys):
    reason = why_not_measurable(target())
    if reason is None:
        pytest.skip("this host can measure sm_90")
    model, inputs = tiny_net()
    db = tmp_path / "model.db"
    with pytest.raises(MeasureUnavailable, match="cannot measure cuda -arch=sm_90"):
        autotune.tune_model(model, inputs, trials=4, target=target(), db=f"sqlite:///{db}")
    assert not db.exists()  # no run, no trial recorded as failed
    code = cli.main(["tune-model", "tests.cuda.test_cuda_model:tiny_net", "--target",
                     "cuda -arch=sm_90", "--trials", "4", "--db", f"sqlite:///{db}"])
    assert code != 0 and reason in capsys.readouterr().err
    assert not db.exists()


def test_tune_on_a_host_without_the_gpu_fails_before_recording(tmp_path: Path):
    """`autotune.tune` checks as `tune_model` does: no job, no trial recorded as failed."""
    if why_not_measurable(target()) is None:
        pytest.skip("this host can measure sm_90")
    db = tmp_path / "op.db"
    wl = autotune.workload("matmul", M=16, N=16, K=16)
    with pytest.raises(MeasureUnavailable, match="cannot measure cuda -arch=sm_90"):
        autotune.tune(wl, target(), trials=4, db=f"sqlite:///{db}", progress=False)
    assert not db.exists()


def test_bench_model_on_a_cuda_target_needs_the_gpu(capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    code = cli.main(["bench-model", "tests.cuda.test_cuda_model:tiny_net", "--target",
                     "cuda -arch=sm_90", "--db", "sqlite://"])
    assert code != 0
    assert "bench-model on cuda -arch=sm_90 needs a CUDA GPU; torch finds none" in \
        capsys.readouterr().err


@pytest.mark.cuda_device
@pytest.mark.parametrize("name", list(NETS))
def test_compiled_model_matches_torch_on_the_gpu(name, nvcc, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("torch finds no CUDA device")
    major, minor = torch.cuda.get_device_capability()
    tgt = autotune.Target(f"cuda -arch=sm_{major}{minor}")
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    model, x = _net(name)
    model, x = model.cuda(), x.cuda()
    compiled = _compile(model, x, tgt)
    mods = kernel_modules(compiled)
    assert all(p.is_cuda for m in mods for p in m.torch_params())  # resident, uploaded once

    def no_fallback(self, *xs):
        raise AssertionError(f"{self.place} ran on torch: {[(x.device, x.shape) for x in xs]}")

    monkeypatch.setattr(CudaKernelModule, "forward_torch", no_fallback)
    with torch.no_grad():
        want = model(x)
        got = compiled(x)
        torch.cuda.synchronize()
        assert got.is_cuda
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * want.abs().max().item())
        side = torch.cuda.Stream()  # torch's current stream, not the default one
        with torch.cuda.stream(side):
            x2 = x * 0.5
            got2 = compiled(x2)
            want2 = model(x2)
        side.synchronize()
        torch.testing.assert_close(got2, want2, rtol=1e-4, atol=1e-4 * want2.abs().max().item())
