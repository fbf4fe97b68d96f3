"""Kernel launches through the CUDA driver API (libcuda, by ctypes) on a stream given by its
handle, with device pointers as arguments: what a framework's tensors need (torch's current
stream). pycuda cannot do this: its ``Stream`` wraps only streams it created, and its
functions expose no handle.

A `DeviceKernel` loads its cubin into the primary context of its device (the context torch
and pycuda use too) on the first launch; nothing here needs pycuda or torch.
"""
from __future__ import annotations

import ctypes
import sys
import threading
import weakref
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Sequence

from autotune.codegen.cuda.errors import NoCudaDevice
from autotune.codegen.cuda.passes import TensorMapSpec
from autotune.codegen.cuda.tensormap import encode_all
from autotune.ops.dtypes import storage_dtype

if TYPE_CHECKING:
    from autotune.codegen.cuda.runtime import CudaKernel

_NO_DEVICE = 100  # CUDA_ERROR_NO_DEVICE
_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_DESCRIPTOR = 128  # bytes of a TMA descriptor (aligned to 128 here; 64 is required)
_TMA_ALIGN = 16    # bytes: a TMA tensor's base address
_LIBRARIES = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")
_P = ctypes.c_void_p
_U = ctypes.c_uint
_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "cuInit": (_U,),
    "cuGetErrorName": (ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)),
    "cuDeviceGet": (ctypes.POINTER(ctypes.c_int), ctypes.c_int),
    "cuDevicePrimaryCtxRetain": (ctypes.POINTER(_P), ctypes.c_int),
    "cuCtxGetCurrent": (ctypes.POINTER(_P),),
    "cuCtxPushCurrent_v2": (_P,),
    "cuCtxPopCurrent_v2": (ctypes.POINTER(_P),),
    "cuModuleLoadData": (ctypes.POINTER(_P), ctypes.c_char_p),
    "cuModuleGetFunction": (ctypes.POINTER(_P), _P, ctypes.c_char_p),
    "cuModuleUnload": (_P,),
    "cuFuncSetAttribute": (_P, ctypes.c_int, ctypes.c_int),
    "cuMemAlloc_v2": (ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t),
    "cuMemsetD32_v2": (ctypes.c_uint64, _U, ctypes.c_size_t),
    "cuMemFree_v2": (ctypes.c_uint64,),
    "cuLaunchKernel": (_P, _U, _U, _U, _U, _U, _U, _U, _P, ctypes.POINTER(_P), ctypes.POINTER(_P)),
}


class CudaDriverError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error code."""


@lru_cache(maxsize=1)
def libcuda() -> ctypes.CDLL:
    """The CUDA driver library, initialised; raises NoCudaDevice saying why there is none."""
    errors = []
    for name in _LIBRARIES:
        try:
            lib = ctypes.CDLL(name)
        except OSError as e:
            errors.append(str(e))
            continue
        for fn, argtypes in _SIGNATURES.items():
            getattr(lib, fn).argtypes = argtypes
            getattr(lib, fn).restype = ctypes.c_int
        code = lib.cuInit(0)
        if code != 0:
            raise NoCudaDevice(f"no CUDA device is present: cuInit failed with "
                               f"{_error_name(lib, code)}")
        return lib
    raise NoCudaDevice(f"no CUDA device is present: the CUDA driver library cannot be loaded "
                       f"({'; '.join(errors)})")


def _error_name(lib: ctypes.CDLL, code: int) -> str:
    name = ctypes.c_char_p()
    if lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
        return f"{name.value.decode()} ({code})"
    return f"error {code}"


def _check(lib: ctypes.CDLL, code: int, call: str) -> None:
    if code == _NO_DEVICE:
        raise NoCudaDevice(f"no CUDA device is present: {call} failed with "
                           f"{_error_name(lib, code)}")
    if code != 0:
        raise CudaDriverError(f"{call} failed with {_error_name(lib, code)}")


class DeviceKernel:
    """One kernel of a cubin on device ``ordinal``: ``launch(pointers, stream)`` runs it on
    the device pointers (arguments in order, the output last) on the stream whose handle is
    ``stream`` (0: the legacy default stream). Its workspaces are allocated and zeroed once
    and passed after the pointers, so launches must not overlap on different streams: a
    split-K kernel's partial tiles and arrival counters would be shared by both (use one
    stream per `DeviceKernel`, or one `DeviceKernel` per stream)."""

    def __init__(self, binary: bytes, entry: str, grid: Sequence[int], block: Sequence[int],
                 shared_bytes: int, n_args: int, workspace_bytes: Sequence[int],
                 ordinal: int = 0, tensor_maps: Sequence[TensorMapSpec] = ()) -> None:
        self.binary, self.entry, self.ordinal = binary, entry, ordinal
        self.tensor_maps = tuple(tensor_maps)
        self._maps: tuple[tuple[int, ...], Any] | None = None  # (pointers, descriptors)
        self.grid = tuple(int(x) for x in grid)
        self.block = tuple(int(x) for x in block)
        self.shared_bytes, self.n_args = int(shared_bytes), n_args
        self.workspace_bytes = tuple(int(b) for b in workspace_bytes)
        self._lock = threading.Lock()
        self._loaded: tuple[ctypes.CDLL, int, int, tuple[int, ...]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # a copy (deepcopy of a compiled model, pickling) loads its own module when launched
        return {**self.__dict__, "_lock": None, "_loaded": None, "_maps": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    def launch(self, pointers: Sequence[int], stream: int = 0) -> None:
        """Launch asynchronously on ``stream``; CudaDriverError when the driver refuses it."""
        if len(pointers) != self.n_args:
            raise TypeError(f"kernel {self.entry!r} takes {self.n_args} device pointers, "
                            f"got {len(pointers)}")
        if self.tensor_maps:  # TMA reads, and the epilogue stores pairs of elements
            odd = [i for i, p in enumerate(pointers) if int(p) % _TMA_ALIGN]
            if odd:
                raise TypeError(f"kernel {self.entry!r}: argument {odd[0]} is not "
                                f"{_TMA_ALIGN}-byte aligned (a TMA kernel's arguments must "
                                "be; a sliced view of a tensor may not be)")
        lib, ctx, fn, workspaces = self._loaded or self._load()
        values = (_P * (self.n_args + len(workspaces)))(*pointers, *workspaces)
        size = ctypes.sizeof(_P)
        base = ctypes.addressof(values)
        maps = self._descriptors(tuple(int(p) for p in pointers))
        params = (_P * (len(maps) + len(values)))(
            *maps, *(base + i * size for i in range(len(values))))
        current = _P()
        _check(lib, lib.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent")
        switch = (current.value or 0) != ctx  # torch may have left another device current
        if switch:
            _check(lib, lib.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
        try:
            _check(lib, lib.cuLaunchKernel(fn, *self.grid, *self.block, self.shared_bytes,
                                           stream or None, params, None),
                   f"cuLaunchKernel({self.entry}, grid {self.grid}, block {self.block})")
        finally:
            if switch:
                lib.cuCtxPopCurrent_v2(ctypes.byref(_P()))

    def _descriptors(self, pointers: tuple[int, ...]) -> list[int]:
        """Host addresses of the TMA descriptors for ``pointers``, 64-byte aligned as a
        CUtensorMap is (encoded again only when the pointers change)."""
        if not self.tensor_maps:
            return []
        if self._maps is None or self._maps[0] != pointers:
            encoded = encode_all(self.tensor_maps, pointers)
            block = ctypes.create_string_buffer(len(encoded) * _DESCRIPTOR + _DESCRIPTOR)
            start = -(-ctypes.addressof(block) // _DESCRIPTOR) * _DESCRIPTOR
            for i, d in enumerate(encoded):
                ctypes.memmove(start + i * _DESCRIPTOR, d, len(d))
            self._maps = (pointers, (block, [start + i * _DESCRIPTOR
                                             for i in range(len(encoded))]))
        return list(self._maps[1][1])

    def _load(self) -> tuple[ctypes.CDLL, int, int, tuple[int, ...]]:
        with self._lock:
            if self._loaded is None:
                self._loaded = self._load_now()
            return self._loaded

    def _load_now(self) -> tuple[ctypes.CDLL, int, int, tuple[int, ...]]:
        lib = libcuda()
        dev, ctx = ctypes.c_int(), _P()
        _check(lib, lib.cuDeviceGet(ctypes.byref(dev), self.ordinal),
               f"cuDeviceGet({self.ordinal})")
        _check(lib, lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev.value),
               "cuDevicePrimaryCtxRetain")
        _check(lib, lib.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
        module, fn, workspaces = _P(), _P(), []
        try:
            _check(lib, lib.cuModuleLoadData(ctypes.byref(module), self.binary),
                   "cuModuleLoadData")
            _check(lib, lib.cuModuleGetFunction(ctypes.byref(fn), module,
                                                self.entry.encode()),
                   f"cuModuleGetFunction({self.entry})")
            if self.shared_bytes:  # past 48 KB a launch needs the function's opt-in
                _check(lib, lib.cuFuncSetAttribute(fn, _MAX_DYNAMIC_SHARED, self.shared_bytes),
                       f"cuFuncSetAttribute({self.entry}, max dynamic shared "
                       f"{self.shared_bytes})")
            for nbytes in self.workspace_bytes:
                ptr, words = ctypes.c_uint64(), -(-max(nbytes, 4) // 4)  # half: odd sizes
                _check(lib, lib.cuMemAlloc_v2(ctypes.byref(ptr), 4 * words), "cuMemAlloc")
                workspaces.append(ptr.value)
                _check(lib, lib.cuMemsetD32_v2(ptr.value, 0, words), "cuMemsetD32")
        finally:
            lib.cuCtxPopCurrent_v2(ctypes.byref(_P()))
        # the module and workspaces live as long as this object (the primary context stays
        # retained: torch and pycuda share it for the process's life)
        weakref.finalize(self, _release, lib, module.value, tuple(workspaces))
        return lib, ctx.value or 0, fn.value or 0, tuple(workspaces)


def _release(lib: ctypes.CDLL, module: int | None, workspaces: tuple[int, ...]) -> None:
    # codes ignored: at interpreter exit the driver may already be torn down
    for ptr in workspaces:
        lib.cuMemFree_v2(ptr)
    if module:
        lib.cuModuleUnload(module)


def device_kernel(kernel: CudaKernel, ordinal: int = 0) -> DeviceKernel:
    """``kernel``'s cubin as a `DeviceKernel` of device ``ordinal``."""
    return DeviceKernel(kernel.binary or b"", kernel.entry, kernel.grid, kernel.block,
                        kernel.dynamic_shared, len(kernel.func.args),
                        [b.size * storage_dtype(b.dtype).itemsize
                         for b in kernel.func.workspaces], ordinal, kernel.tensor_maps)
