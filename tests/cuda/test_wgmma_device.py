"""On a Hopper GPU host (marker ``cuda_device``; skipped elsewhere, run by
scripts/gpu-check.sh): the wgmma kernels match the float32 reference within their dtype's
tolerance, for the default and sampled configs of every op and dtype, through pycuda
(`CudaKernel`, as measurement runs them) and through the driver API on torch's tensors
(`DeviceKernel`, as compiled models run them), and over many tiles per block (the
persistent loop, the stage ring wrapping its barrier phases)."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune import driver
from autotune.measure.capability import why_not_measurable
from autotune.measure.correctness import check_output
from tests.cuda.wgmma_cases import DTYPES, OPS, sample_valid, target, workloads

SAMPLED = 3


@pytest.fixture(scope="module")
def hopper(gpu, nvcc):
    reason = why_not_measurable(target())
    if reason:
        pytest.skip(f"sm_90a kernels need a Hopper GPU: {reason}")
    return target()


def _check(wl, tgt, cfg, seed):
    kernel = autotune.compile(wl, tgt, cfg)
    args = wl.random_args(seed)
    ref = wl.reference(args[:-1])
    kernel(*args)
    wrong = check_output(args[-1], ref, 0.0, 0.0, wl.dtype)
    assert wrong is None, f"{wl} {dict(cfg)}: {wrong}"


@pytest.mark.cuda_device
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_wgmma_kernels_match_the_reference_on_the_gpu(op, dtype, hopper):
    for i, wl in enumerate(workloads(op, dtype)):
        sp = driver.config_space(wl, hopper)
        for cfg in [sp.default(), *sample_valid(wl, SAMPLED, seed=3 + i)]:
            _check(wl, hopper, cfg, i)


@pytest.mark.cuda_device
@pytest.mark.parametrize("change", [
    {},                                                        # 128 x 256, 2 consumers
    dict(inflight=1, stages=3, raster="n", group=4),
    dict(consumers=1, m_tiles=2, block_n=128, stages=6, group=1),
])
def test_many_tiles_per_block_wrap_the_stage_ring(change, hopper):
    wl = autotune.workload("matmul", M=2048, N=2304, K=320, dtype="float16",
                           epilogue=("bias",))
    sp = driver.config_space(wl, hopper)
    cfg = sp.config(dict(sp.default()) | dict(consumers=2, m_tiles=1, block_n=256) | change)
    assert sp.invalid_reason(cfg) is None
    _check(wl, hopper, cfg, 1)


@pytest.mark.cuda_device
def test_the_driver_launch_path_encodes_descriptors_for_torch_tensors(hopper):
    from autotune.codegen.cuda.launcher import device_kernel
    torch = pytest.importorskip("torch")
    wl = autotune.workload("batch_matmul", B=2, M=200, N=136, K=96, dtype="bfloat16",
                           epilogue=("bias", "relu"))
    kernel = autotune.compile(wl, hopper)
    args = wl.random_args(5)
    ref = wl.reference(args[:-1])
    dk = device_kernel(kernel)
    stream = torch.cuda.current_stream().cuda_stream
    for _ in range(2):  # new tensors: new pointers, descriptors encoded again
        # bfloat16 bits as int16: the same bytes, a type every torch can copy
        tensors = [torch.from_numpy(a.view(np.int16) if a.dtype == np.uint16 else a).cuda()
                   for a in args[:-1]]
        out = torch.zeros(args[-1].shape, dtype=torch.int16, device="cuda")
        dk.launch([t.data_ptr() for t in (*tensors, out)], stream)
        torch.cuda.synchronize()
        got = out.cpu().numpy().view(args[-1].dtype)
        assert check_output(got, ref, 0.0, 0.0, "bfloat16") is None


@pytest.mark.cuda_device
@pytest.mark.parametrize("wl", [
    autotune.workload("conv2d", N=1, C=512, H=7, W=7, K=512, R=3, S=3, stride=1, pad=1,
                      dtype="float16", layout="NHWC", epilogue=("bias", "relu")),
    autotune.workload("matmul", M=128, N=256, K=2048, dtype="bfloat16"),
])
def test_split_k_is_correct_over_repeated_launches(wl, hopper):
    """The split counters are left at zero for the next launch of the loaded kernel."""
    sp = driver.config_space(wl, hopper)
    cfg = sp.default()
    if cfg["split_k"] == 1:
        cfg = sp.config(dict(cfg) | dict(split_k=4))
    assert cfg["split_k"] > 1 and sp.invalid_reason(cfg) is None
    kernel = autotune.compile(wl, hopper, cfg)
    for seed in range(3):
        args = wl.random_args(seed)
        ref = wl.reference(args[:-1])
        kernel(*args)
        assert check_output(args[-1], ref, 0.0, 0.0, wl.dtype) is None, seed
