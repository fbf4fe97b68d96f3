"""TMA descriptors encoded on the host: ``cuTensorMapEncodeTiled`` through libcuda (ctypes).

A kernel that copies with TMA takes one 128-byte descriptor per `TensorMapSpec` as its
leading parameters; both launch paths (pycuda's `CudaKernel`, the driver's `DeviceKernel`)
encode them from the argument pointers they are about to pass, once per set of pointers.
"""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from autotune.codegen.cuda.passes import TensorMapSpec
from autotune.ops.dtypes import element_bytes

DESCRIPTOR_BYTES = 128
_ALIGN = 64
# CUtensorMapDataType, CUtensorMapSwizzle and CUtensorMapL2promotion values (cuda.h)
_DATA_TYPES = {"float16": 6, "float32": 7, "bfloat16": 9}
_SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}
_L2_PROMOTION_256B = 3
_LIBRARIES = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")


class TensorMapError(RuntimeError):
    """The driver refused a descriptor (or there is no driver); the message says which."""


@lru_cache(maxsize=1)
def _encoder() -> ctypes._CFuncPtr:  # type: ignore[name-defined]
    for name in _LIBRARIES:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        fn = lib.cuTensorMapEncodeTiled
        u32, u64 = ctypes.c_uint32, ctypes.c_uint64
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, u32, ctypes.c_void_p,
                       ctypes.POINTER(u64), ctypes.POINTER(u64), ctypes.POINTER(u32),
                       ctypes.POINTER(u32), ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn
    raise TensorMapError("no CUDA driver library: TMA descriptors cannot be encoded")


@dataclass(frozen=True)
class EncodeArgs:
    """``cuTensorMapEncodeTiled``'s arguments for one spec, innermost dimension first:
    data type code, dims, byte strides of dims 1.., box, swizzle code."""

    data_type: int
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: int


def encode_args(spec: TensorMapSpec) -> EncodeArgs:
    """What the driver is told about ``spec``'s row-major argument and box."""
    item = element_bytes(spec.dtype)
    dims = tuple(reversed(spec.shape))
    strides, acc = [], item
    for extent in dims[:-1]:
        acc *= extent
        strides.append(acc)
    steps = spec.element_strides or (1,) * len(dims)
    return EncodeArgs(_DATA_TYPES[spec.dtype], dims, tuple(strides),
                      tuple(reversed(spec.box)), tuple(reversed(steps)),
                      _SWIZZLES[spec.swizzle])


def encode(spec: TensorMapSpec, pointer: int) -> bytes:
    """The 128-byte descriptor of ``spec`` for the device array at ``pointer``."""
    a = encode_args(spec)
    rank = len(a.dims)
    u32, u64 = ctypes.c_uint32, ctypes.c_uint64
    raw = ctypes.create_string_buffer(DESCRIPTOR_BYTES + _ALIGN)
    base = -(-ctypes.addressof(raw) // _ALIGN) * _ALIGN   # the driver wants it 64-aligned
    code = _encoder()(
        base, a.data_type, rank, ctypes.c_void_p(pointer), (u64 * rank)(*a.dims),
        (u64 * max(rank - 1, 1))(*a.strides), (u32 * rank)(*a.box),
        (u32 * rank)(*a.element_strides), 0, a.swizzle, _L2_PROMOTION_256B, 0)
    if code != 0:
        raise TensorMapError(f"cuTensorMapEncodeTiled refused {spec} at {pointer:#x} "
                             f"(CUresult {code})")
    return ctypes.string_at(base, DESCRIPTOR_BYTES)


def encode_all(specs: Sequence[TensorMapSpec], pointers: Sequence[int]) -> list[bytes]:
    """The descriptors of ``specs``, each for the argument pointer it names."""
    return [encode(s, pointers[s.arg]) for s in specs]
