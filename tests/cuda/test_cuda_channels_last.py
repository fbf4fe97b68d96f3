"""Channels-last convs on Hopper (`compile_model(layout="auto")` on cuda -arch=sm_90a): a
half model's convs whose channels TMA can copy run on the wgmma kernels in NHWC, the rest
in NCHW; every planned kernel runs right in the execution model; the modules keep the
weight KRSC and still run CPU tensors on torch; and on a Hopper GPU host (marker
``cuda_device``) the compiled model matches torch, with channels_last and contiguous inputs."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import autotune  # noqa: E402
from autotune.api import NoTunedScheduleWarning  # noqa: E402
from autotune.frontend.cuda_runtime import CudaKernelModule  # noqa: E402
from autotune.frontend.runtime import kernel_modules, plan_model  # noqa: E402
from autotune.measure.capability import why_not_measurable  # noqa: E402
from autotune.ops import dtype_info  # noqa: E402
from tests.frontend.frontend_nets import TinyResNet, randomize_bn  # noqa: E402

HOPPER = "cuda -arch=sm_90a"


def _net(device: str = "cpu"):
    torch.manual_seed(0)
    model = randomize_bn(TinyResNet()).to(device=device, dtype=torch.float16)
    return model, torch.randn(1, 3, 32, 32).to(device=device, dtype=torch.float16)


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoTunedScheduleWarning)
        return fn(*args, **kwargs)


def test_convs_the_wgmma_kernels_take_are_planned_nhwc_and_run_right():
    model, x = _net()
    plan = _quiet(plan_model, model, x, target=HOPPER, db=None, layout="auto")
    layouts = {k.workload.op + ":" + k.workload.layout for k in plan}
    assert "conv2d:NHWC" in layouts and "conv2d:NCHW" in layouts  # the stem has 3 channels
    for k in plan:
        if k.workload.op == "conv2d":
            assert (k.workload.layout == "NHWC") == (k.workload.dim("C") % 8 == 0)
        err = autotune.simulate_cuda(k.workload, k.config, HOPPER)
        assert err < dtype_info("float16").rtol, k.workload
    default = _quiet(plan_model, model, x, target=HOPPER, db=None)
    assert [k.workload for k in default] == [k.workload for k in plan]  # auto is the default
    nchw = _quiet(plan_model, model, x, target=HOPPER, db=None, layout="nchw")
    assert {k.workload.layout for k in nchw} == {"NCHW"}  # layout="nchw" keeps them


def test_an_nhwc_module_keeps_its_weight_krsc_and_runs_cpu_tensors_on_torch(nvcc):
    model, x = _net()
    compiled = _quiet(autotune.compile_model, model, x, target=HOPPER, db=None,
                      layout="auto")
    mods = [m for m in kernel_modules(compiled) if isinstance(m, CudaKernelModule)]
    nhwc = [m for m in mods if m.workload.layout == "NHWC"]
    assert nhwc
    for m in nhwc:
        k, r, s, c = m.kernel_params()[0].shape
        assert m.torch_params()[0].shape == (k, c, r, s)
    with torch.no_grad():
        got, want = compiled(x), model(x)
    err = ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()
    assert err < 5e-3


@pytest.mark.cuda_device
@pytest.mark.parametrize("memory_format", [torch.channels_last, torch.contiguous_format],
                         ids=["channels_last", "contiguous"])
def test_the_channels_last_model_matches_torch_on_a_hopper_gpu(nvcc, monkeypatch,
                                                                memory_format):
    """A channels_last model and input pass through as they are; a contiguous (NCHW) one is
    converted once, at the first NHWC conv: both must match torch."""
    if not torch.cuda.is_available() or why_not_measurable(autotune.Target(HOPPER)):
        pytest.skip("needs a Hopper GPU")

    def no_fallback(self, *xs):
        raise AssertionError(f"{self.place} ran on torch")
    monkeypatch.setattr(CudaKernelModule, "forward_torch", no_fallback)
    model, x = _net("cuda")
    model = model.to(memory_format=memory_format)
    x = x.contiguous(memory_format=memory_format)
    compiled = _quiet(autotune.compile_model, model, x, target=HOPPER, db=None,
                      layout="auto", cuda_graphs=False)
    with torch.no_grad():
        got, want = compiled(x), model(x)
    err = ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()
    assert err < 5e-3
