"""CudaKernel: without a device a compiled kernel still carries its CUDA C and cubin and
says clearly why it cannot run; on a GPU host (marker ``cuda_device``) it matches numpy."""
from __future__ import annotations

import re

import numpy as np
import pytest

import autotune
from autotune.codegen.cuda.runtime import CudaKernel, NoCudaDevice, load_cuda_kernel
from autotune.codegen.kernel import Kernel
from tests.cuda.cuda_cases import EPILOGUES, SHAPES, target


def _no_device() -> bool:
    from autotune.codegen.cuda.runtime import cuda_device
    try:
        cuda_device(0)
    except NoCudaDevice:
        return True
    return False


def test_compile_without_a_device_gives_source_and_cubin(nvcc):
    if not _no_device():
        pytest.skip("a CUDA device is present: the no-device error cannot be observed")
    wl = autotune.workload("matmul", epilogue=("bias", "relu"), **SHAPES["matmul"][0])
    k = autotune.compile(wl, target())
    assert isinstance(k, Kernel) and isinstance(k, CudaKernel)
    assert '__global__ void __launch_bounds__' in k.source
    assert k.binary[:4] == b"\x7fELF"
    with pytest.raises(RuntimeError, match="no CUDA device is present: "):
        k(*wl.random_args(0))
    with pytest.raises(RuntimeError, match="no CUDA device is present"):
        k.time(wl.random_args(0), number=1, repeat=1)


def test_loading_needs_the_launch_config():
    from autotune import driver
    wl = autotune.workload("matmul", **SHAPES["matmul"][0])
    f = driver.lower(wl, target())  # lowered, never compiled: no launch config recorded
    with pytest.raises(ValueError, match="compile_cuda"):
        load_cuda_kernel(f, target(), "", b"")


@pytest.mark.cuda_device
@pytest.mark.parametrize("op", list(SHAPES))
def test_kernels_match_numpy_on_the_gpu(op, gpu, nvcc):
    from tests.cuda.cuda_cases import sample_valid
    for shape in SHAPES[op]:
        for epi in EPILOGUES:
            wl = autotune.workload(op, epilogue=epi, **shape)
            for cfg in [None, *sample_valid(wl, 2, seed=11)]:
                k = autotune.compile(wl, target(), cfg)
                args = wl.random_args(1)
                ref = wl.reference(args)
                k(*args)
                np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4,
                                           err_msg=f"{wl} {cfg}")


class _Driver:
    """pycuda's driver as far as a launch uses it, recording what it is asked (this host has
    no GPU); numpy arrays stand for device memory."""

    class function_attribute:  # noqa: N801 (pycuda's name)
        MAX_DYNAMIC_SHARED_SIZE_BYTES = "MAX_DYNAMIC_SHARED_SIZE_BYTES"

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def module_from_buffer(self, binary: bytes) -> "_Driver":
        self.calls.append(("load", binary[:4]))
        return self

    def get_function(self, entry: str) -> "_Driver":
        return self

    def prepare(self, spec: str) -> None:
        self.calls.append(("prepare", spec))

    def set_attribute(self, attr: str, value: int) -> None:
        self.calls.append(("set_attribute", attr, value))

    def prepared_call(self, grid, block, *args, shared_size: int = 0) -> None:
        self.calls.append(("launch", grid, block, shared_size))

    def mem_alloc(self, nbytes: int) -> int:
        return 0x1000 + nbytes

    def memcpy_htod(self, dev, a) -> None:
        pass

    def memcpy_dtoh(self, a, dev) -> None:
        pass


def test_dynamic_shared_memory_is_opted_in_once_and_launched_with(monkeypatch, nvcc):
    """pycuda: set_attribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) once when the function loads,
    then each launch asks for the kernel's dynamic bytes."""
    from autotune.codegen.cuda import runtime

    fake = _Driver()
    monkeypatch.setattr(runtime, "cuda_device", lambda ordinal=0: fake)
    wl = autotune.workload("matmul", M=2048, N=4096, K=64, dtype="float16")
    k = autotune.compile(wl, autotune.Target("cuda -arch=sm_90"))  # 4 stages: 84480 bytes
    assert k.dynamic_shared == k.func.attrs["launch"]["dynamic_shared_bytes"] > 49152
    args = wl.random_args(0)
    k(*args)
    k(*args)
    attr = ("set_attribute", "MAX_DYNAMIC_SHARED_SIZE_BYTES", k.dynamic_shared)
    launch = ("launch", k.grid, k.block, k.dynamic_shared)
    assert fake.calls == [("load", b"\x7fELF"), ("prepare", "PPP"), attr, launch, launch]
    small_wl = autotune.workload("matmul", M=64, N=64, K=64, dtype="float16")
    small = autotune.compile(small_wl, target())
    fake.calls.clear()
    small(*small_wl.random_args(0))
    assert [c[0] for c in fake.calls] == ["load", "prepare", "launch"]
    assert fake.calls[-1][-1] == 0  # static shared memory only: nothing to opt in to


@pytest.mark.cuda_device
def test_device_arrays_and_event_timing(gpu, nvcc):
    wl = autotune.workload("conv2d", epilogue=("scale_shift", "relu"), **SHAPES["conv2d"][0])
    k = autotune.compile(wl, target())
    args = wl.random_args(2)
    ref = wl.reference(args)
    costs = k.time(args, number=5, repeat=3)
    assert len(costs) == 3 and all(0 < c < 1 for c in costs)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4)
    dev = [gpu.to_device(a) for a in args]  # pycuda DeviceAllocations, run in place
    k(*dev)
    out = np.empty_like(args[-1])
    gpu.memcpy_dtoh(out, dev[-1])
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


# ---- half arguments: held and copied in their storage form ------------------------------

def _half_kernel(dtype: str, source: str = "", binary: bytes = b"") -> CudaKernel:
    """``out[i] = 2 * A[i]`` over 40 elements of ``dtype``, as a hand-written kernel."""
    from autotune.ir.stmt import Buffer, PrimFunc, Seq

    args = (Buffer("A", (40,), dtype), Buffer("out", (40,), dtype))
    func = PrimFunc("twice", args, Seq([]), attrs={
        "launch": {"grid": (1, 1, 1), "block": (64, 1, 1)}, "cuda_kernel": "twice"})
    return CudaKernel(func, source, binary, target())


@pytest.mark.parametrize("dtype, held", [("float16", np.float16), ("bfloat16", np.uint16)])
def test_half_arguments_are_checked_against_their_storage_dtype(dtype, held):
    k = _half_kernel(dtype)
    assert k.arg_dtypes == (np.dtype(held),) * 2
    k.check_args([np.zeros(40, held), np.zeros(40, held)])
    shown = dtype if held is np.float16 else f"{dtype} (held as uint16)"
    with pytest.raises(TypeError, match=rf"argument 0 \(A\) of kernel 'twice': expected dtype "
                                        rf"{re.escape(shown)}, got float32"):
        k.check_args([np.zeros(40, np.float32), np.zeros(40, held)])


HALF_SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void twice(const T* __restrict__ a, T* __restrict__ out) {
  int i = threadIdx.x;
  if (i < 40) out[i] = FROM(2.0f * TO(a[i]));
}
"""


@pytest.mark.cuda_device
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_arrays_cross_to_the_device_uncast(dtype, gpu, nvcc):
    from autotune.codegen.cuda.nvcc import nvcc_cubin
    from autotune.ops.dtypes import to_float32, to_storage

    c_type, to, frm = {"float16": ("__half", "__half2float", "__float2half_rn"),
                       "bfloat16": ("__nv_bfloat16", "__bfloat162float",
                                    "__float2bfloat16_rn")}[dtype]
    source = f"#define T {c_type}\n#define TO {to}\n#define FROM {frm}\n" + HALF_SOURCE
    cubin, _ = nvcc_cubin(source, target().arch)
    k = _half_kernel(dtype, source, cubin)
    a = to_storage(np.linspace(-1, 1, 40, dtype=np.float32), dtype)
    out = to_storage(np.full(40, np.nan, np.float32), dtype)
    k(a, out)
    np.testing.assert_array_equal(to_float32(out, dtype), 2 * to_float32(a, dtype))
