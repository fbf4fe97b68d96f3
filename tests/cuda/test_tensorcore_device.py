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


def _split_configs(wl, tgt, splits=(2, 4, 8, 16)):
    sp = driver.config_space(wl, tgt)
    out = []
    for split in splits:
        for change in (dict(warps_m=2, warps_n=2, frags_m=1, frags_n=1, block_k=16), {}):
            cfg = sp.config(dict(sp.default()) | change | dict(split_k=split))
            if sp.invalid_reason(cfg) is None:
                out.append(cfg)
                break
    return out


@pytest.mark.cuda_device
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_split_k_kernels_match_the_reference_launch_after_launch(op, dtype, gpu, nvcc):
    """Splits of 2 to 16 on long reductions; three launches on the same workspaces (each
    relies on the last block of the one before having reset the counters)."""
    tgt = device_target()
    wl = {"matmul": autotune.workload("matmul", M=72, N=40, K=1000, dtype=dtype,
                                      epilogue=("bias", "relu")),
          "batch_matmul": autotune.workload("batch_matmul", B=3, M=24, N=40, K=640,
                                            dtype=dtype),
          "conv2d": autotune.workload("conv2d", N=2, C=64, H=7, W=7, K=48, R=3, S=3,
                                      stride=1, pad=1, dtype=dtype,
                                      epilogue=("scale_shift", "residual", "relu"))}[op]
    configs = _split_configs(wl, tgt)
    assert len(configs) >= 3
    for i, cfg in enumerate(configs):
        kernel = autotune.compile(wl, tgt, cfg)
        for launch in range(3):
            args = wl.random_args(10 * i + launch)
            kernel(*args)
            wrong = check_output(args[-1], wl.reference(args[:-1]), 0.0, 0.0, dtype)
            assert wrong is None, f"{wl} {dict(cfg)} launch {launch}: {wrong}"


@pytest.mark.cuda_device
def test_the_driver_launcher_runs_a_split_kernel_with_its_own_scratch(gpu, nvcc):
    """The ctypes launcher (compiled models' path) allocates the workspaces itself."""
    import numpy as np

    from autotune.codegen.cuda.launcher import device_kernel

    tgt = device_target()
    wl = autotune.workload("conv2d", N=1, C=128, H=7, W=7, K=64, R=3, S=3, stride=1, pad=1,
                           dtype="float16")
    cfg = _split_configs(wl, tgt, (8,))[0]
    dk = device_kernel(autotune.compile(wl, tgt, cfg))
    for seed in range(2):
        args = wl.random_args(seed)
        dev = [gpu.to_device(np.ascontiguousarray(a)) for a in args]
        dk.launch([int(d) for d in dev])
        gpu.Context.synchronize()
        out = np.empty_like(args[-1])
        gpu.memcpy_dtoh(out, dev[-1])
        wrong = check_output(out, wl.reference(args[:-1]), 0.0, 0.0, "float16")
        assert wrong is None, wrong
