"""Half-precision models on a CUDA target: every planned kernel of a float16 or bfloat16
tiny net runs right in the execution model, nvcc builds them and CPU tensors run the folded
groups on torch in the model's dtype; on a GPU host (marker ``cuda_device``) the compiled
model matches torch in float16, bfloat16 and under autocast, without falling back."""
from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import autotune  # noqa: E402
from autotune.api import NoTunedScheduleWarning  # noqa: E402
from autotune.frontend.cuda_runtime import CudaKernelModule  # noqa: E402
from autotune.frontend.runtime import kernel_modules, plan_model  # noqa: E402
from autotune.ops import dtype_info  # noqa: E402
from tests.cuda.cuda_cases import target  # noqa: E402
from tests.frontend.frontend_nets import TinyMobileNet, TinyResNet, randomize_bn  # noqa: E402

NETS = {"resnet": TinyResNet, "mobilenet": TinyMobileNet}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
# the whole model against torch's, relative to its largest output: both round every layer
MODEL_TOL = {"float16": 5e-3, "bfloat16": 4e-2}


def _net(name: str, dtype: torch.dtype, device: str = "cpu"):
    torch.manual_seed(0)
    model = randomize_bn(NETS[name]()).to(device=device, dtype=dtype)
    return model, torch.randn(1, 3, 32, 32).to(device=device, dtype=dtype)


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoTunedScheduleWarning)
        return fn(*args, **kwargs)


def _close(got, want, dtype: str) -> None:
    assert got.dtype == want.dtype
    err = ((got.double() - want.double()).abs().max() / want.double().abs().max()).item()
    assert err < MODEL_TOL[dtype], f"max error {err:.2e} relative to the largest output"


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(NETS))
def test_every_planned_half_kernel_runs_right_in_the_execution_model(name, dtype):
    model, x = _net(name, DTYPES[dtype])
    plan = _quiet(plan_model, model, x, target=target(), db=None)
    assert plan and {k.workload.dtype for k in plan} == {dtype}
    for k in plan:
        err = autotune.simulate_cuda(k.workload, k.config, target())
        assert err < dtype_info(dtype).rtol, k.workload


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_compile_model_builds_half_kernels_and_runs_cpu_tensors_on_torch(dtype, nvcc):
    model, x = _net("mobilenet", DTYPES[dtype])
    compiled = _quiet(autotune.compile_model, model, x, target=target(), db=None)
    mods = kernel_modules(compiled)
    assert mods and all(isinstance(m, CudaKernelModule) for m in mods)
    assert "depthwise_conv2d" in {m.workload.op for m in mods}
    for m in mods:
        assert m.kernel.binary[:4] == b"\x7fELF"
        assert all(p.dtype == DTYPES[dtype] for p in m.torch_params())
    with torch.no_grad():
        _close(compiled(x), model(x), dtype)


@pytest.fixture
def device_arch(nvcc, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("torch finds no CUDA device")
    major, minor = torch.cuda.get_device_capability()

    def no_fallback(self, *xs):
        raise AssertionError(f"{self.place} ran on torch: "
                             f"{[(x.device, x.dtype, x.shape) for x in xs]}")

    monkeypatch.setattr(CudaKernelModule, "forward_torch", no_fallback)
    return autotune.Target(f"cuda -arch=sm_{major}{minor}")


@pytest.mark.cuda_device
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(NETS))
def test_compiled_half_model_matches_torch_on_the_gpu(name, dtype, device_arch):
    model, x = _net(name, DTYPES[dtype], "cuda")
    compiled = _quiet(autotune.compile_model, model, x, target=device_arch, db=None)
    with torch.no_grad():
        want = model(x)
        got = compiled(x)
    _close(got, want, dtype)


class _Autocast(torch.nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.net = randomize_bn(NETS[name]())

    def forward(self, x):
        with torch.autocast("cuda", dtype=torch.float16):
            return self.net(x)


@pytest.mark.cuda_device
@pytest.mark.parametrize("name", list(NETS))
def test_an_autocast_model_runs_half_kernels_on_the_gpu(name, device_arch):
    torch.manual_seed(0)
    model, x = _Autocast(name).eval().cuda(), torch.randn(1, 3, 32, 32, device="cuda")
    compiled = _quiet(autotune.compile_model, model, x, target=device_arch, db=None)
    assert {m.workload.dtype for m in kernel_modules(compiled)} == {"float16"}
    with torch.no_grad():
        want = model(x)
        got = compiled(x)  # the float32 image is cast by the first kernel's module
    _close(got, want, "float16")
