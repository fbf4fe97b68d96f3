"""Element types a workload may name, and all that depends on one, in one place.

float32 is computed as float32. float16 and bfloat16 are storage types: every argument of
the workload (inputs, epilogue vectors, residual, output) is stored in it, products are
accumulated and epilogues applied in float32, and the result is rounded once, to nearest
even, when it is stored. The reference is computed from the same rounded inputs in float64,
so the tolerance of a half type covers that one final rounding, plus float32 accumulation.

numpy has float16 but no bfloat16: a bfloat16 array is held as its uint16 bit patterns
(the upper half of a float32), which is also how it crosses to a device.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np


@dataclass(frozen=True)
class DType:
    """An element type: its storage in numpy and in CUDA C, and how close a kernel's output
    must come to the reference (``max|out-ref| <= atol + rtol * max|ref|``)."""

    name: str
    itemsize: int
    storage: str        # numpy dtype of host arrays
    c_type: str         # CUDA C type of a kernel argument's elements
    rtol: float
    atol: float

    @property
    def is_half(self) -> bool:
        return self.itemsize == 2


DTYPE_INFO: Mapping[str, DType] = MappingProxyType({
    "float32": DType("float32", 4, "float32", "float", rtol=1e-4, atol=1e-4),
    # one rounding to 11 significant bits is 2^-11 relative; allow a few ulps
    "float16": DType("float16", 2, "float16", "__half", rtol=2e-3, atol=1e-4),
    # 8 significant bits: 2^-8 relative
    "bfloat16": DType("bfloat16", 2, "uint16", "__nv_bfloat16", rtol=1e-2, atol=1e-4),
})
DTYPES: tuple[str, ...] = tuple(DTYPE_INFO)
HALF_DTYPES: tuple[str, ...] = tuple(n for n, d in DTYPE_INFO.items() if d.is_half)


def dtype_info(name: str) -> DType:
    """The `DType` called ``name``; ValueError naming the choices for another."""
    try:
        return DTYPE_INFO[name]
    except KeyError:
        raise ValueError(f"unsupported dtype {name!r}; supported: {', '.join(DTYPES)}") from None


def to_storage(values: np.ndarray, name: str) -> np.ndarray:
    """``values`` rounded to nearest even into dtype ``name``'s storage (a new array): once,
    from float64 values too (a folded weight), never through float32 first."""
    if name == "bfloat16":
        return _bfloat16_bits(np.asarray(values))
    with np.errstate(over="ignore"):  # beyond float16's range is inf, as on the device
        return np.asarray(values, dtype=dtype_info(name).storage).copy()


def _bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns of ``values`` rounded to nearest even (NaN: a quiet NaN)."""
    with np.errstate(over="ignore"):  # beyond float32's range is inf, as on the device
        bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    # round to nearest even on the 16 dropped bits
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    out = (rounded >> np.uint32(16)).astype(np.uint16)
    if values.dtype == np.float64:
        # float32 was a first rounding: of the two bfloat16 values around float32(x) (which
        # are those around x), take the nearer to x itself, the even one on a tie
        low = (bits >> np.uint32(16)).astype(np.uint16)
        high = low + np.uint16(1)
        with np.errstate(invalid="ignore"):  # inf - inf: not finite, left as rounded
            d_low = np.abs(values - to_float32(low, "bfloat16"))
            d_high = np.abs(values - to_float32(high, "bfloat16"))
        pick_high = (d_high < d_low) | ((d_high == d_low) & (low & np.uint16(1)).astype(bool))
        finite = np.isfinite(values) & np.isfinite(to_float32(high, "bfloat16"))
        out = np.where(finite, np.where(pick_high, high, low), out).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        out[nan] = np.uint16(0x7FC0)
    return out


def to_float32(stored: np.ndarray, name: str) -> np.ndarray:
    """The float32 values of an array held in dtype ``name``'s storage (exact)."""
    if name == "bfloat16":
        bits = np.ascontiguousarray(stored, dtype=np.uint16).astype(np.uint32) << np.uint32(16)
        return bits.view(np.float32)
    return np.asarray(stored, dtype=np.float32)


def round_to(values: np.ndarray, name: str) -> np.ndarray:
    """``values`` as float32 after rounding them to dtype ``name`` (identity for float32)."""
    if name == "float32":
        return np.asarray(values, dtype=np.float32)
    return to_float32(to_storage(values, name), name)


# The operators a half dtype exists for: those the tensor-core template serves, and
# depthwise_conv2d (on CUDA cores, accumulating in float32).
HALF_OPS: tuple[str, ...] = ("matmul", "batch_matmul", "conv2d", "depthwise_conv2d")
# bfloat16 tensor-core MMA (and its arithmetic in cuda_bf16.h) starts with Ampere.
_BF16_MIN_SM = 80


def op_dtypes(op: str) -> tuple[str, ...]:
    """The dtypes operator ``op`` may be given in."""
    return DTYPES if op in HALF_OPS else ("float32",)


def op_refusal(op: str, dtype: str) -> str | None:
    """Why ``op`` cannot take ``dtype`` (None when it can): unknown, or half on an op
    without a half kernel."""
    if not isinstance(dtype, str) or dtype not in DTYPE_INFO:
        return f"{op}: unsupported dtype {dtype!r}; supported: {', '.join(DTYPES)}"
    if dtype not in op_dtypes(op):
        return (f"{op}: dtype {dtype!r} is not supported for {op}; half dtypes exist for "
                f"{', '.join(HALF_OPS)} only (use float32)")
    return None


def target_refusal(dtype: str, kind: str, arch: str = "") -> str | None:
    """Why a target of ``kind`` (``arch`` for cuda, e.g. ``sm_80``) cannot run ``dtype``
    (None when it can): half dtypes run on CUDA GPUs only, bfloat16 from sm_80."""
    if dtype == "float32":
        return None
    if kind != "cuda":
        return (f"dtype {dtype!r} is not supported on {kind} (CPU) targets: half-precision "
                f"kernels run on CUDA GPUs only; use float32, or a cuda target")
    if dtype == "bfloat16" and _sm(arch) < _BF16_MIN_SM:
        return (f"dtype 'bfloat16' needs a cuda target of sm_{_BF16_MIN_SM} or later "
                f"(bfloat16 tensor-core MMA starts there); this target is {arch}")
    return None


def _sm(arch: str) -> int:
    digits = arch.removeprefix("sm_").removesuffix("a")  # sm_90a: sm_90's features and more
    return int(digits) if digits.isdigit() else 0


def storage_nan(name: str) -> Any:
    """NaN in dtype ``name``'s storage: what an output is filled with before a kernel runs,
    so that elements it never writes show."""
    return to_storage(np.array([np.nan], dtype=np.float32), name)[0]


# Element types of kernel-internal buffers, never a workload's: an mbarrier is a 64-bit word
# of shared memory.
MBARRIER = "uint64"
_INTERNAL_C_TYPES: Mapping[str, tuple[str, int]] = MappingProxyType({
    MBARRIER: ("unsigned long long", 8),
    "int32": ("int", 4),
    "int64": ("long long", 8),  # the loop IR's index expressions
    "bool": ("bool", 1),        # and its conditions
})
# Bytes of an element of each type a buffer may have (`element_bytes`), as one table.
ELEMENT_BYTES: Mapping[str, int] = MappingProxyType({
    **{name: d.itemsize for name, d in DTYPE_INFO.items()},
    **{name: size for name, (_, size) in _INTERNAL_C_TYPES.items()}})


def element_c_type(name: str) -> str:
    """CUDA C type of a buffer element of type ``name`` (a workload dtype or internal)."""
    internal = _INTERNAL_C_TYPES.get(name)
    return internal[0] if internal is not None else dtype_info(name).c_type


def element_bytes(name: str) -> int:
    """Bytes of a buffer element of type ``name`` (a workload dtype or internal)."""
    size = ELEMENT_BYTES.get(name)
    return size if size is not None else dtype_info(name).itemsize  # raises, naming it


def storage_dtype(name: str) -> np.dtype:
    """The numpy dtype host arrays of element type ``name`` are held in: a workload dtype's
    storage (bfloat16: uint16), else ``name`` read by numpy (a buffer's int32, say)."""
    info = DTYPE_INFO.get(name)
    return np.dtype(info.storage if info is not None else name)
