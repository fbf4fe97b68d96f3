"""On a GPU host (marker ``cuda_device``; skipped elsewhere, run by scripts/gpu-check.sh):
the tensor-core kernels nvcc builds, run on the device, match the float32 reference within
their dtype's tolerance, for the default and sampled configs of every op and dtype, and
for large tiles past 48 KB of shared memory through both launch paths. Here,
without a GPU, the execution model checks the same kernels (test_tensorcore_simulate.py)."""
from __future__ import annotations

import pytest

import autotune
from autotune import driver
from autotune.measure.correctness import check_output
from tests.cuda.cuda_cases import target as device_target
from tests.cuda.tensorcore_cases import DTYPES, LARGE_TILE, OPS, sample_valid, workloads

SAMPLED = 3  # per workload, besides the default


@pytest.mark.cuda_device
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_tensorcore_kernels_match_the_reference_on_the_gpu(op, dtype, gpu, nvcc):
    tgt = device_target()
    for i, wl in enumerate(workloads(op, dtype)):
        sp = driver.config_space(wl, tgt)
        for cfg in [sp.default(), *sample_valid(wl, SAMPLED, seed=7 + i, arch=tgt.arch)]:
            kernel = autotune.compile(wl, tgt, cfg)
            args = wl.random_args(i)
            ref = wl.reference(args[:-1])
            kernel(*args)
            wrong = check_output(args[-1], ref, 0.0, 0.0, dtype)
            assert wrong is None, f"{wl} {dict(cfg)}: {wrong}"


@pytest.mark.cuda_device
@pytest.mark.parametrize("change", [
    {},                                                   # 128 x 256 x 32, 3 stages: 88 KB
    dict(warps_m=4, warps_n=2, block_k=64, stages=4),     # 256 x 128 x 64, 4 stages: 221 KB
])
def test_large_tiles_past_48kb_match_the_reference_on_the_gpu(change, gpu, nvcc):
    """Dynamic shared memory, opted in by pycuda (CudaKernel) and by the driver API
    (DeviceKernel, on torch's tensors and stream)."""
    from autotune.codegen.cuda.launcher import device_kernel
    tgt = device_target()
    wl = autotune.workload("matmul", M=264, N=520, K=200, dtype="float16",
                           epilogue=("bias", "relu"))
    sp = driver.config_space(wl, tgt)
    cfg = sp.config(LARGE_TILE | change)
    reason = sp.invalid_reason(cfg)
    if reason:
        pytest.skip(f"{tgt.arch}: {reason}")
    kernel = autotune.compile(wl, tgt, cfg)
    assert kernel.dynamic_shared > 49152
    args = wl.random_args(3)
    ref = wl.reference(args[:-1])
    kernel(*args)
    assert check_output(args[-1], ref, 0.0, 0.0, "float16") is None
    torch = pytest.importorskip("torch")
    tensors = [torch.from_numpy(a).cuda() for a in args[:-1]]
    out = torch.zeros(args[-1].shape, dtype=torch.float16, device="cuda")
    device_kernel(kernel).launch([t.data_ptr() for t in (*tensors, out)],
                                 torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert check_output(out.cpu().numpy(), ref, 0.0, 0.0, "float16") is None
