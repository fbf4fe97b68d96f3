"""``Kernel``: a compiled PrimFunc, callable on arrays; one subclass per backend."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from autotune.ir.stmt import Buffer, PrimFunc
from autotune.ops.dtypes import storage_dtype


class Kernel:
    """A compiled kernel: ``kernel(*arrays)`` takes the PrimFunc's arguments in order
    (inputs, then the output) and writes the output in place. ``pack``: for a prepacked
    workload's kernel, the kernel that packs its constant operand (``pack(operand,
    packed)``), whose output the kernel takes in the operand's place; else None."""

    pack: "Kernel | None" = None

    def __init__(self, func: PrimFunc, source: str, binary: bytes | None, target: Any):
        self.func = func
        self.source = source  # human-readable generated code (LLVM IR, CUDA C)
        self.binary = binary  # compiled image when the backend has one (cubin), else None
        self.target = target
        # host arrays in each argument's storage dtype (float16; bfloat16 as uint16 bits)
        self.arg_dtypes = tuple(storage_dtype(b.dtype) for b in func.args)
        # the arrays' shapes: the buffers', unless the loop AST views an argument in another
        # shape of the same size (`autotune.driver`: a grouped conv's images by group)
        self.arg_shapes: tuple[tuple[int, ...], ...] = tuple(
            func.attrs.get("arg_shapes") or (b.shape for b in func.args))

    @property
    def name(self) -> str:
        return self.func.name

    @property
    def arg_buffers(self) -> tuple[Buffer, ...]:
        return self.func.args

    def __repr__(self) -> str:
        args = ", ".join(f"{b.name}{list(b.shape)}" for b in self.func.args)
        return f"{type(self).__name__}({self.name}({args}))"

    def __call__(self, *arrays: Any) -> None:
        self.check_args(arrays)
        self._launch(arrays)

    def _launch(self, arrays: Sequence[Any]) -> None:
        raise NotImplementedError

    def check_args(self, arrays: Sequence[Any]) -> None:
        """Raise TypeError/ValueError naming the first argument that does not fit."""
        bufs = self.func.args
        if len(arrays) != len(bufs):
            names = ", ".join(b.name for b in bufs)
            raise TypeError(f"kernel {self.name!r} takes {len(bufs)} arrays ({names}), "
                            f"got {len(arrays)}")
        last = len(bufs) - 1
        for i, (a, b, dt, shape) in enumerate(zip(arrays, bufs, self.arg_dtypes,
                                                  self.arg_shapes)):
            # fast path first: this runs on every call
            if (isinstance(a, np.ndarray) and a.dtype == dt and a.shape == shape
                    and a.flags.c_contiguous and (i < last or a.flags.writeable)):
                continue
            self._arg_error(i, b, a, is_output=i == last)

    def _arg_error(self, i: int, b: Buffer, a: Any, is_output: bool) -> None:
        what = f"argument {i} ({b.name}) of kernel {self.name!r}"
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{what}: expected a numpy.ndarray, got {type(a).__name__}")
        if a.dtype != self.arg_dtypes[i]:
            held = "" if b.dtype == self.arg_dtypes[i].name else f" (held as {self.arg_dtypes[i]})"
            raise TypeError(f"{what}: expected dtype {b.dtype}{held}, got {a.dtype}")
        if a.shape != self.arg_shapes[i]:
            raise ValueError(f"{what}: expected shape {self.arg_shapes[i]}, got {a.shape}")
        if not a.flags.c_contiguous:
            raise ValueError(f"{what}: array must be C-contiguous (use np.ascontiguousarray)")
        if is_output and not a.flags.writeable:
            raise ValueError(f"{what}: the output array is read-only")
