"""``CpuKernel``: runs JIT-compiled LLVM kernels on numpy arrays through ctypes.

The generated code assumes 64-byte aligned, non-overlapping data; arrays that are not
aligned are staged through aligned copies (pass ``autotune.ops.aligned_empty`` arrays to
avoid that).
"""
from __future__ import annotations

import ctypes
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from autotune.codegen.kernel import Kernel
from autotune.codegen.llvm.compiler import compile_llvm_object, entry_name
from autotune.codegen.llvm.jit import load_object
from autotune.ir.stmt import PrimFunc, Store, walk_stmts
from autotune.ops.workload import aligned_empty

ALIGN = 64
_ENTRY = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))


def aligned_copy(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape)
    out[...] = a
    return out


class CpuKernel(Kernel):
    """A kernel JIT-compiled for the host CPU; holds its engine (the code lives there).

    Not reentrant: workspaces are allocated once per kernel and shared by all calls."""

    def __init__(self, func: PrimFunc, source: str, target: Any, engine: Any, address: int,
                 binary: bytes | None = None):
        super().__init__(func, source, binary, target)
        self._engine = engine  # freeing it unmaps the code, so it lives as long as we do
        self._entry = _ENTRY(address)
        self._nptrs = len(func.args) + len(func.workspaces)
        self._ptr_array = ctypes.c_void_p * self._nptrs
        self.workspaces = tuple(aligned_empty(b.shape) for b in func.workspaces)
        for w in self.workspaces:
            w.fill(0)
        self._ws_ptrs = tuple(w.ctypes.data for w in self.workspaces)
        stored = {s.buffer for s in walk_stmts(func.body) if isinstance(s, Store)}
        self._written = [i for i, b in enumerate(func.args) if b in stored]

    def _pointers(self, arrays: Sequence[np.ndarray], ptrs: list[int]) -> Any:
        """The entry's pointer array; raises if an array the kernel writes overlaps another
        argument (the generated code declares its pointers ``noalias``)."""
        for w in self._written:
            lo, hi = ptrs[w], ptrs[w] + arrays[w].nbytes
            for i, (p, a) in enumerate(zip(ptrs, arrays)):
                if i != w and p < hi and lo < p + a.nbytes:
                    raise ValueError(f"kernel {self.name!r}: argument {w} "
                                     f"({self.func.args[w].name}) overlaps argument {i} "
                                     f"({self.func.args[i].name})")
        return self._ptr_array(*ptrs, *self._ws_ptrs)

    def _launch(self, arrays: Sequence[np.ndarray]) -> None:
        ptrs = [a.ctypes.data for a in arrays]
        misaligned = 0
        for p in ptrs:
            misaligned |= p
        if not misaligned % ALIGN:
            self._entry(self._pointers(arrays, ptrs))
            return
        staged = [a if p % ALIGN == 0 else aligned_copy(a) for a, p in zip(arrays, ptrs)]
        self._pointers(arrays, ptrs)  # overlap is judged on the caller's arrays
        self._entry(self._pointers(staged, [a.ctypes.data for a in staged]))
        if staged[-1] is not arrays[-1]:
            arrays[-1][...] = staged[-1]

    def bind(self, *arrays: np.ndarray) -> Callable[[], None]:
        """Validate once and return a zero-argument callable running the kernel on
        ``arrays`` (for timing loops). Unaligned arrays make each call copy them."""
        self.check_args(arrays)
        data = [a.ctypes.data for a in arrays]
        if any(p % ALIGN for p in data):
            return lambda: self._launch(arrays)
        ptrs, entry = self._pointers(arrays, data), self._entry

        def run(_keep: tuple = (self, arrays)) -> None:  # _keep: the engine and the data
            entry(ptrs)

        return run

    def partial(self, fixed: Mapping[int, np.ndarray]) -> "BoundCall":
        """Fix the arguments at the positions of ``fixed`` (a model's weights), checked once;
        the returned call takes only the others, as raw 64-byte aligned data pointers."""
        bufs = self.func.args
        for i, a in fixed.items():
            if not 0 <= i < len(bufs) - 1:
                raise ValueError(f"kernel {self.name!r}: argument {i} cannot be fixed "
                                 f"(inputs are 0..{len(bufs) - 2})")
            if not (isinstance(a, np.ndarray) and a.dtype == np.float32
                    and a.shape == self.arg_shapes[i] and a.flags.c_contiguous):
                self._arg_error(i, bufs[i], a, is_output=False)
            if a.ctypes.data % ALIGN:
                raise ValueError(f"kernel {self.name!r}: fixed argument {i} "
                                 f"({bufs[i].name}) is not {ALIGN}-byte aligned")
        return BoundCall(self, fixed)


class BoundCall:
    """A `CpuKernel` with some arguments fixed: ``call(*pointers)`` passes the data pointers
    of the other arguments, in order (the output last), straight to the entry: no checks,
    no arrays, no pointer array built per call. The caller owns the contract: each pointer
    64-byte aligned, to live memory of the argument's shape, the output overlapping nothing."""

    def __init__(self, kernel: CpuKernel, fixed: Mapping[int, np.ndarray]) -> None:
        self.kernel, self.fixed = kernel, dict(fixed)  # both kept alive with the call
        n = len(kernel.func.args)
        self.free = tuple(i for i in range(n) if i not in fixed)
        self._ptrs = kernel._ptr_array(*[0] * n, *kernel._ws_ptrs)
        for i, a in fixed.items():
            self._ptrs[i] = a.ctypes.data
        self._entry = kernel._entry

    def set_pointer(self, j: int, pointer: int) -> None:
        """Set the ``j``-th free argument's pointer for the calls that follow."""
        self._ptrs[self.free[j]] = pointer

    def set_workspace(self, i: int, pointer: int) -> None:
        """Put the ``i``-th workspace (a padded input, a packed panel) at ``pointer`` (64-byte
        aligned, as long as ``kernel.workspaces[i]``) for the calls that follow: a kernel
        writes all of a workspace before it reads any, so memory that other calls use in
        between serves (a model plan's arena)."""
        self._ptrs[len(self.kernel.func.args) + i] = pointer

    @property
    def native(self) -> tuple[int, int]:
        """(the entry's address, its pointer array's address): what native code calls, with
        the pointers last given (`set_pointer`, or the last call's)."""
        return (ctypes.cast(self._entry, ctypes.c_void_p).value or 0,
                ctypes.addressof(self._ptrs))

    def run(self) -> None:
        """Call the entry on the pointers last set."""
        self._entry(self._ptrs)

    def __call__(self, *pointers: int) -> None:
        if len(pointers) != len(self.free):
            raise TypeError(f"kernel {self.kernel.name!r}: {len(self.free)} pointers expected "
                            f"(arguments {list(self.free)}), got {len(pointers)}")
        ptrs = self._ptrs
        for i, p in zip(self.free, pointers):
            ptrs[i] = p
        self._entry(ptrs)


def load_cpu_kernel(func: PrimFunc, target: Any, source: str, binary: bytes) -> CpuKernel:
    """Link object code from ``compile_llvm_object`` into this process as a kernel."""
    engine = load_object(binary, target)
    name = entry_name(func)
    address = engine.get_function_address(name)
    if not address:
        raise RuntimeError(f"object code has no entry symbol {name!r}")
    return CpuKernel(func, source, target, engine, address, binary)


def compile_llvm(func: PrimFunc, target: Any) -> CpuKernel:
    """Generate, optimize (O3) and JIT-load ``func`` for the host CPU."""
    return load_cpu_kernel(func, target, *compile_llvm_object(func, target))
