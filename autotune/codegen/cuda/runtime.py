"""``CudaKernel``: a cubin loaded with pycuda, callable on numpy or device arrays.

Arrays cross to and from the device as they are held, never cast: each argument in its
buffer's storage dtype (float32, float16, or bfloat16 as uint16 bits; see
`autotune.ops.dtypes`), so a half kernel reads and writes the bits the host holds.

Loading is lazy: without pycuda or a GPU a kernel still exists (its ``source`` and
``binary`` can be read) and calling it raises ``RuntimeError("no CUDA device is present:
...")``. The CUDA context is the device's primary context, made current in the calling
thread on first use (one kernel object should be used from one thread). The kernel's
workspaces (split-K's partial tiles and counters) are allocated and zeroed once, at load,
and passed after the arguments at every launch; the kernel leaves its counters at 0.
"""
from __future__ import annotations

import atexit
import functools
from typing import Any, Callable, Sequence

import numpy as np

from autotune.codegen.cuda.errors import NoCudaDevice
from autotune.codegen.cuda.launcher import DeviceKernel
from autotune.codegen.cuda.passes import TensorMapSpec
from autotune.codegen.kernel import Kernel
from autotune.ir.stmt import Buffer, PrimFunc
from autotune.ops.dtypes import storage_dtype


@functools.lru_cache(maxsize=None)
def cuda_device(ordinal: int = 0) -> Any:
    """pycuda's driver module with device ``ordinal``'s primary context current; raises
    NoCudaDevice saying why there is none. Cached: the context lives for the process."""
    try:
        import pycuda.driver as cuda
    except ImportError as e:
        raise NoCudaDevice(f"no CUDA device is present: pycuda cannot be imported ({e}); "
                           "install the 'cuda' extra on a GPU host") from None
    try:
        cuda.init()
        count = cuda.Device.count()
    except Exception as e:  # pycuda raises its own types for a missing driver
        raise NoCudaDevice(f"no CUDA device is present: the CUDA driver failed ({e})") from None
    if count <= ordinal:
        raise NoCudaDevice(f"no CUDA device is present: {count} device(s), asked for "
                           f"#{ordinal}")
    if cuda.Context.get_current() is None:
        ctx = cuda.Device(ordinal).retain_primary_context()
        ctx.push()
        atexit.register(_pop_context, cuda)  # pycuda aborts at exit on a non-empty stack
    return cuda


def _pop_context(cuda: Any) -> None:
    try:
        cuda.Context.pop()
    except Exception:  # already torn down: nothing left to release
        pass


def load_cuda_kernel(func: PrimFunc, target: Any, source: str, binary: bytes) -> "CudaKernel":
    """Wrap a cubin from ``compiler.compile_cuda`` (which recorded the launch config and entry
    name in ``func.attrs``); the module is loaded on first use."""
    return CudaKernel(func, source, binary, target)


class CudaKernel(Kernel):
    """A CUDA kernel: ``kernel(*arrays)`` copies numpy arrays in and the output back, or
    runs in place on device arrays (pycuda allocations or ``__cuda_array_interface__``)."""

    def __init__(self, func: PrimFunc, source: str, binary: bytes, target: Any):
        super().__init__(func, source, binary, target)
        launch = func.attrs.get("launch")
        if launch is None or "cuda_kernel" not in func.attrs:
            raise ValueError(f"kernel {func.name!r}: func.attrs lack the launch config; "
                             "compile it with autotune.codegen.cuda.compiler.compile_cuda")
        self.entry: str = func.attrs["cuda_kernel"]
        self.grid = tuple(int(x) for x in launch["grid"])
        self.block = tuple(int(x) for x in launch["block"])
        self.dynamic_shared = int(launch.get("dynamic_shared_bytes", 0))
        self.tensor_maps = tuple(TensorMapSpec.from_dict(m)
                                 for m in launch.get("tensor_maps", ()))
        self._cuda: Any = None
        self._module: Any = None
        self._function: Any = None
        self._workspaces: list[Any] = []
        self._staging: list[Any] | None = None  # device copies of numpy arguments
        self._driver: DeviceKernel | None = None  # the launcher of TMA kernels

    # ------------------------------------------------------------------ loading
    def _load(self) -> Any:
        """pycuda's driver, with the module loaded and workspaces allocated (once)."""
        if self._function is None:
            cuda = cuda_device(0)
            module = cuda.module_from_buffer(self.binary)
            fn = module.get_function(self.entry)
            fn.prepare("P" * (len(self.func.args) + len(self.func.workspaces)))
            if self.dynamic_shared:  # past 48 KB a launch needs the function's opt-in
                fn.set_attribute(cuda.function_attribute.MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 self.dynamic_shared)
            self._module = module  # the function is valid only while its module lives
            self._workspaces = [_zeroed(cuda, b) for b in self.func.workspaces]
            self._cuda, self._function = cuda, fn
        return self._cuda

    # ------------------------------------------------------------------ calling
    def __call__(self, *arrays: Any) -> None:
        launch, copy_back = self._prepare(arrays)
        launch()
        if copy_back is not None:
            copy_back()

    def bind(self, *arrays: Any) -> Callable[[], None]:
        """Validate once, copy numpy inputs to the device, and return a zero-argument
        launcher (numpy outputs are not copied back: use ``__call__`` or ``time``)."""
        return self._prepare(arrays)[0]

    def time(self, arrays: Sequence[Any], number: int = 10, repeat: int = 3) -> list[float]:
        """Seconds per call of each of ``repeat`` runs of ``number`` back-to-back launches,
        timed with CUDA events after one warm-up launch; the output is copied back."""
        if number < 1 or repeat < 1:
            raise ValueError(f"time: number and repeat must be >= 1, got {number}, {repeat}")
        launch, copy_back = self._prepare(arrays)
        cuda = self._cuda
        launch()
        start, end = cuda.Event(), cuda.Event()
        costs = []
        for _ in range(repeat):
            start.record()
            for _ in range(number):
                launch()
            end.record()
            end.synchronize()
            costs.append(end.time_since(start) / 1e3 / number)  # time_since is in ms
        if copy_back is not None:
            copy_back()
        return costs

    def _prepare(self, arrays: Sequence[Any]
                 ) -> tuple[Callable[[], None], Callable[[], None] | None]:
        """A launcher on the arguments' device copies, and how to fetch a numpy output."""
        cuda = self._load()
        ptrs, copy_back = self._device_pointers(cuda, arrays)
        fn, grid, block, shared = self._function, self.grid, self.block, self.dynamic_shared
        if self.tensor_maps:
            # TMA descriptors (128-byte __grid_constant__ values) go through the driver
            # API: launched by pycuda's parameter buffer, these kernels hit an illegal
            # instruction on an H200, and ran correctly launched by cuLaunchKernel
            driver = self._driver_kernel()
            return lambda: driver.launch(ptrs, 0), copy_back
        args = (*ptrs, *(int(w) for w in self._workspaces))

        def launch() -> None:
            fn.prepared_call(grid, block, *args, shared_size=shared)

        return launch, copy_back

    def _driver_kernel(self) -> DeviceKernel:
        """This kernel as a `DeviceKernel` on the same (primary) context, launched on the
        legacy default stream, where pycuda's events time it."""
        if self._driver is None:
            self._driver = DeviceKernel(
                self.binary or b"", self.entry, self.grid, self.block, self.dynamic_shared,
                len(self.func.args), [_nbytes(b) for b in self.func.workspaces],
                tensor_maps=self.tensor_maps)
        return self._driver

    def _device_pointers(self, cuda: Any, arrays: Sequence[Any]
                         ) -> tuple[list[int], Callable[[], None] | None]:
        """Device pointers of the arguments; numpy arrays go through staging buffers
        allocated once per kernel."""
        bufs = self.func.args
        if len(arrays) != len(bufs) or all(isinstance(a, np.ndarray) for a in arrays):
            self.check_args(arrays)
        if all(isinstance(a, np.ndarray) for a in arrays):
            if self._staging is None:
                self._staging = [cuda.mem_alloc(_nbytes(b)) for b in bufs]
            for dev, a in zip(self._staging[:-1], arrays[:-1]):
                cuda.memcpy_htod(dev, a)
            out, dev_out = arrays[-1], self._staging[-1]
            return [int(d) for d in self._staging], lambda: cuda.memcpy_dtoh(out, dev_out)
        return [_pointer(a, b, shape, i, self.name)
                for i, (a, b, shape) in enumerate(zip(arrays, bufs, self.arg_shapes))], None

    def _launch(self, arrays: Sequence[Any]) -> None:  # Kernel's hook; __call__ is overridden
        self(*arrays)


def _contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """Byte strides of a C-contiguous array of ``shape``."""
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _nbytes(b: Buffer) -> int:
    """Bytes of a device copy of ``b`` (at least one element)."""
    return max(b.size, 1) * storage_dtype(b.dtype).itemsize


def _zeroed(cuda: Any, b: Buffer) -> Any:
    nbytes = _nbytes(b)
    mem = cuda.mem_alloc(nbytes)
    cuda.memset_d8(mem, 0, nbytes)  # bytes: a half buffer may be an odd number of words
    return mem


def _pointer(a: Any, b: Buffer, shape: tuple[int, ...], i: int, kernel: str) -> int:
    """Device address of argument ``i`` (``shape``: the array's), checking shape and dtype
    where the object says."""
    what = f"argument {i} ({b.name}) of kernel {kernel!r}"
    dt = storage_dtype(b.dtype)
    if isinstance(a, np.ndarray):
        raise TypeError(f"{what}: mix of numpy and device arrays; pass all of one kind")
    iface = getattr(a, "__cuda_array_interface__", None)
    if iface is not None:
        if tuple(iface["shape"]) != shape:
            raise ValueError(f"{what}: expected shape {shape}, got {tuple(iface['shape'])}")
        if np.dtype(iface["typestr"]) != dt:
            raise TypeError(f"{what}: expected {_named(b, dt)}, got {np.dtype(iface['typestr'])}")
        if iface.get("strides") not in (None, _contiguous_strides(shape, dt.itemsize)):
            raise ValueError(f"{what}: device array must be C-contiguous")
        return int(iface["data"][0])
    gpudata = getattr(a, "gpudata", None)  # pycuda GPUArray
    if gpudata is not None:
        if tuple(a.shape) != shape or np.dtype(a.dtype) != dt:
            raise ValueError(f"{what}: expected {_named(b, dt)}{list(shape)}, got "
                             f"{np.dtype(a.dtype)}{list(a.shape)}")
        return int(gpudata)
    try:
        return int(a)  # a pycuda DeviceAllocation (or a raw address): size is unchecked
    except TypeError:
        raise TypeError(f"{what}: expected a numpy array or a device array, "
                        f"got {type(a).__name__}") from None


def _named(b: Buffer, dt: np.dtype) -> str:
    """``b``'s dtype as an error names it: ``bfloat16 (uint16)`` where storage differs."""
    return b.dtype if b.dtype == dt.name else f"{b.dtype} ({dt})"
