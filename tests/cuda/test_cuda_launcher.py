"""`DeviceKernel`'s calls into the CUDA driver, checked against a stand-in libcuda (built here
with the C compiler) that records what it is given: this host has no GPU driver. The real
driver runs them in the GPU tests (test_cuda_model.py)."""
from __future__ import annotations

import copy
import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

import autotune
from autotune.codegen.cuda import launcher
from autotune.codegen.cuda.launcher import CudaDriverError, DeviceKernel, device_kernel
from tests.cuda.cuda_cases import SHAPES, target

# Handles are fixed addresses; every call is recorded in globals the test reads back.
STUB = r"""
#include <stdint.h>
#include <string.h>
#include <stddef.h>
#define CTX ((void *)0x1000)
void *current = 0;
int pushes = 0, pops = 0, unloads = 0, frees = 0, launches = 0, fail_launch = 0, nargs = 0;
unsigned dims[7];
void *stream = 0, *function = 0;
uint64_t args[16];
char entry[256], image[4];
uint64_t memset_words = 0;
int attributes = 0, attribute = -1, attribute_value = 0;
int cuInit(unsigned flags) { return 0; }
int cuGetErrorName(int code, const char **s) { *s = "CUDA_ERROR_STANDIN"; return 0; }
int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return ordinal > 0 ? 101 : 0; }
int cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = CTX; return 0; }
int cuCtxGetCurrent(void **ctx) { *ctx = current; return 0; }
int cuCtxPushCurrent_v2(void *ctx) { pushes++; current = ctx; return 0; }
int cuCtxPopCurrent_v2(void **ctx) { pops++; *ctx = current; current = 0; return 0; }
int cuModuleLoadData(void **mod, const void *img) {
    memcpy(image, img, 4); *mod = (void *)0x2000; return 0; }
int cuModuleGetFunction(void **fn, void *mod, const char *name) {
    strncpy(entry, name, 255); *fn = (void *)0x3000; return 0; }
int cuModuleUnload(void *mod) { unloads++; return 0; }
int cuFuncSetAttribute(void *fn, int attr, int value) {
    if (fn != (void *)0x3000) return 400;
    attributes++; attribute = attr; attribute_value = value; return 0; }
int cuMemAlloc_v2(uint64_t *ptr, size_t n) { *ptr = 0x50000 + n; return 0; }
int cuMemsetD32_v2(uint64_t ptr, unsigned v, size_t n) { memset_words = n; return 0; }
int cuMemFree_v2(uint64_t ptr) { frees++; return 0; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *s, void **params, void **extra) {
    if (fail_launch) return 701;
    unsigned d[7] = {gx, gy, gz, bx, by, bz, shared};
    memcpy(dims, d, sizeof d);
    function = f; stream = s; launches++;
    for (int i = 0; i < nargs; i++) args[i] = *(uint64_t *)params[i];
    return extra == 0 ? 0 : 1;
}
"""


@pytest.fixture
def stub(tmp_path: Path, monkeypatch) -> ctypes.CDLL:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in driver with")
    src, lib = tmp_path / "stub.c", tmp_path / "libcuda_standin.so"
    src.write_text(STUB)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True,
                   capture_output=True, timeout=120)
    monkeypatch.setattr(launcher, "_LIBRARIES", (str(lib),))
    launcher.libcuda.cache_clear()
    yield ctypes.CDLL(str(lib))
    launcher.libcuda.cache_clear()


def _int(lib: ctypes.CDLL, name: str) -> int:
    return ctypes.c_int.in_dll(lib, name).value


def test_a_compiled_kernel_launches_with_its_config_pointers_and_stream(stub, nvcc):
    wl = autotune.workload("conv2d", epilogue=("bias", "relu"), **SHAPES["conv2d"][0])
    kernel = autotune.compile(wl, target())
    dk = device_kernel(kernel, 0)
    ptrs = [0x7000, 0x7100, 0x7200, 0x7300]  # data, weight, bias, out
    ctypes.c_int.in_dll(stub, "nargs").value = len(ptrs)
    dk.launch(ptrs, stream=0xBEEF)
    assert ctypes.string_at(ctypes.addressof(ctypes.c_char.in_dll(stub, "entry"))) == \
        kernel.entry.encode()
    assert bytes((ctypes.c_char * 4).in_dll(stub, "image")) == b"\x7fELF"
    assert list((ctypes.c_uint * 7).in_dll(stub, "dims")) == [
        *kernel.grid, *kernel.block, kernel.dynamic_shared]
    assert ctypes.c_void_p.in_dll(stub, "stream").value == 0xBEEF
    assert ctypes.c_void_p.in_dll(stub, "function").value == 0x3000
    assert list((ctypes.c_uint64 * 4).in_dll(stub, "args")) == ptrs
    # loading pushed the primary context and popped it; the launch found another current
    assert (_int(stub, "pushes"), _int(stub, "pops")) == (2, 2)
    ctypes.c_void_p.in_dll(stub, "current").value = 0x1000  # torch left it current
    dk.launch(ptrs, stream=0)  # the legacy default stream: NULL
    assert ctypes.c_void_p.in_dll(stub, "stream").value is None
    assert (_int(stub, "pushes"), _int(stub, "launches")) == (2, 2)


def test_dynamic_shared_memory_is_opted_in_once_per_loaded_function(stub, nvcc):
    """A kernel past 48 KB of shared memory: cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES
    = 8) once when its function is loaded, then every launch asks for those bytes."""
    wl = autotune.workload("matmul", M=2048, N=4096, K=64, dtype="float16")
    kernel = autotune.compile(wl, autotune.Target("cuda -arch=sm_90"))  # 4 stages: 84480 bytes
    assert kernel.dynamic_shared > 49152
    dk = device_kernel(kernel, 0)
    ctypes.c_int.in_dll(stub, "nargs").value = 3
    dk.launch([0x10, 0x20, 0x30])
    dk.launch([0x10, 0x20, 0x40])
    assert (_int(stub, "attributes"), _int(stub, "attribute")) == (1, 8)
    assert _int(stub, "attribute_value") == kernel.dynamic_shared
    assert list((ctypes.c_uint * 7).in_dll(stub, "dims"))[6] == kernel.dynamic_shared
    copy.deepcopy(dk).launch([0x10, 0x20, 0x50])  # a copy loads, and opts in, on its own
    assert _int(stub, "attributes") == 2
    small = DeviceKernel(b"\x7fELF", "k", (1, 1, 1), (32, 1, 1), 0, 3, [])
    small.launch([0x10, 0x20, 0x30])  # static shared memory only: nothing to opt in to
    assert _int(stub, "attributes") == 2


def test_workspaces_are_zeroed_once_and_passed_after_the_arguments(stub):
    dk = DeviceKernel(b"\x7fELF....", "k", (3, 2, 1), (32, 4, 1), 0, 2, [40])
    ctypes.c_int.in_dll(stub, "nargs").value = 3
    dk.launch([0x10, 0x20])
    dk.launch([0x10, 0x30])
    assert list((ctypes.c_uint64 * 3).in_dll(stub, "args")) == [0x10, 0x30, 0x50000 + 40]
    assert ctypes.c_uint64.in_dll(stub, "memset_words").value == 10
    copied = copy.deepcopy(dk)  # as deepcopy(compiled model) does: loads its own module
    copied.launch([0x10, 0x40])
    assert ctypes.c_uint64.in_dll(stub, "args").value == 0x10
    del dk, copied  # the modules and the workspaces go with the kernels
    assert (_int(stub, "unloads"), _int(stub, "frees")) == (2, 2)


def test_driver_errors_name_the_call_and_code(stub):
    dk = DeviceKernel(b"\x7fELF", "k", (1, 1, 1), (1, 1, 1), 0, 1, [])
    ctypes.c_int.in_dll(stub, "fail_launch").value = 1
    with pytest.raises(CudaDriverError, match=r"cuLaunchKernel\(k, grid \(1, 1, 1\), block "
                                              r"\(1, 1, 1\)\) failed with "
                                              r"CUDA_ERROR_STANDIN \(701\)"):
        dk.launch([0x10])
    assert (_int(stub, "pushes"), _int(stub, "pops")) == (2, 2)  # each push popped
    with pytest.raises(CudaDriverError, match=r"cuDeviceGet\(1\) failed"):
        DeviceKernel(b"", "k", (1, 1, 1), (1, 1, 1), 0, 1, [], ordinal=1).launch([0])


def test_half_workspaces_are_sized_by_their_storage_and_zeroed_whole(stub):
    from autotune.codegen.cuda.runtime import CudaKernel
    from autotune.ir.stmt import Buffer, PrimFunc, Seq

    args = (Buffer("A", (3,), "float16"), Buffer("out", (3,), "float16"))
    func = PrimFunc("k", args, Seq([]),
                    workspaces=(Buffer("w", (3,), "bfloat16"),),
                    attrs={"launch": {"grid": (1, 1, 1), "block": (32, 1, 1)},
                           "cuda_kernel": "k"})
    dk = device_kernel(CudaKernel(func, "", b"\x7fELF", target()), 0)
    assert dk.workspace_bytes == (6,)  # 3 bfloat16 elements, not 3 floats
    ctypes.c_int.in_dll(stub, "nargs").value = 3
    dk.launch([0x10, 0x20])
    # 6 bytes round up to 2 words, all of them zeroed
    assert list((ctypes.c_uint64 * 3).in_dll(stub, "args")) == [0x10, 0x20, 0x50000 + 8]
    assert ctypes.c_uint64.in_dll(stub, "memset_words").value == 2


def test_a_split_k_kernel_gets_its_scratch_once_after_the_arguments(stub, nvcc):
    """The partial tiles and the counters: allocated and zeroed at the first launch, the
    same two pointers after the workload's arguments at every launch."""
    wl = autotune.workload("matmul", M=40, N=48, K=200, dtype="float16")
    sp = autotune.driver.config_space(wl, target())
    cfg = sp.config(dict(sp.default()) | dict(split_k=4, warps_m=2, warps_n=2, frags_m=1,
                                              frags_n=1, block_k=16))
    kernel = autotune.compile(wl, target(), cfg)
    dk = device_kernel(kernel, 0)
    partials, counters = 4 * 2 * 2 * 32 * 32 * 4, 2 * 2 * 4  # bytes: S x tiles x BM x BN
    assert dk.workspace_bytes == (partials, counters)
    ctypes.c_int.in_dll(stub, "nargs").value = 5
    for out in (0x7200, 0x7300):
        dk.launch([0x7000, 0x7100, out])
        assert list((ctypes.c_uint64 * 5).in_dll(stub, "args")) == [
            0x7000, 0x7100, out, 0x50000 + partials, 0x50000 + counters]
    assert ctypes.c_uint64.in_dll(stub, "memset_words").value == counters // 4  # the last
    assert kernel.grid[2] == 4  # the splits
