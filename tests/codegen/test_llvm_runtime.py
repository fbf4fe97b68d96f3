"""CpuKernel: argument validation, alignment staging, bind(), call overhead, clean exit."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import llvmlite.binding as llvm
import numpy as np
import pytest

from autotune.codegen.kernel import Kernel
from autotune.codegen.llvm.compiler import compile_llvm_object
from autotune.codegen.llvm.runtime import CpuKernel, compile_llvm
from autotune.ir.expr import Var
from autotune.ir.stmt import Buffer, For, ForKind, PrimFunc, Store
from autotune.ops import aligned_empty

REPO = Path(__file__).resolve().parents[2]


def host_target() -> SimpleNamespace:
    llvm.initialize_native_target()
    feats = llvm.get_host_cpu_features().flatten()
    return SimpleNamespace(mcpu=llvm.get_host_cpu_name(), features=feats,
                           cores=len(os.sched_getaffinity(0)),
                           vector_bits=512 if "+avx512f" in feats else 256)


def axpy_func(parallel: bool = True) -> PrimFunc:
    """Z = 2*X + Y over a (8, 64) grid: rows parallel, 16-lane vectors."""
    X, Y, Z = Buffer("X", (8, 64)), Buffer("Y", (8, 64)), Buffer("Z", (8, 64))
    i, jo, v = Var("i"), Var("jo"), Var("v")
    col = jo * 16 + v
    body = For(jo, 4, ForKind.SERIAL, For(v, 16, ForKind.VECTORIZED,
                                          Store(Z, (i, col), X[i, col] * 2.0 + Y[i, col])))
    return PrimFunc("axpy", (X, Y, Z),
                    For(i, 8, ForKind.PARALLEL if parallel else ForKind.SERIAL, body))


@pytest.fixture(scope="module")
def kernel() -> CpuKernel:
    return compile_llvm(axpy_func(), host_target())


def inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((8, 64)).astype(np.float32),
            rng.standard_normal((8, 64)).astype(np.float32))


def test_kernel_attributes(kernel):
    assert isinstance(kernel, Kernel) and kernel.name == "axpy"
    assert [b.name for b in kernel.arg_buffers] == ["X", "Y", "Z"]
    assert kernel.binary[:4] == b"\x7fELF" and kernel.target.cores >= 1
    assert "define void @axpy(ptr %args)" in kernel.source


@pytest.mark.parametrize("bad, exc, match", [
    (lambda x, y, z: (x, y), TypeError, r"takes 3 arrays \(X, Y, Z\), got 2"),
    (lambda x, y, z: (x, y.astype(np.float64), z), TypeError, r"argument 1 \(Y\).*float32"),
    (lambda x, y, z: (x.tolist(), y, z), TypeError, r"argument 0 \(X\).*numpy.ndarray"),
    (lambda x, y, z: (x, y, z[:, :32]), ValueError, r"argument 2 \(Z\).*shape \(8, 64\)"),
    (lambda x, y, z: (x.reshape(64, 8), y, z), ValueError, r"argument 0 \(X\).*shape"),
    (lambda x, y, z: (np.asfortranarray(x), y, z), ValueError, r"argument 0 \(X\).*C-contiguous"),
    (lambda x, y, z: (x, y, _read_only(z)), ValueError, r"argument 2 \(Z\).*read-only"),
    (lambda x, y, z: (x, y, x), ValueError, r"argument 2 \(Z\) overlaps argument 0 \(X\)"),
], ids=["count", "dtype", "type", "shape", "shape2", "order", "readonly", "alias"])
def test_argument_validation(kernel, bad, exc, match):
    x, y = inputs()
    z = np.zeros((8, 64), np.float32)
    with pytest.raises(exc, match=match):
        kernel(*bad(x, y, z))


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def test_unaligned_arrays_are_staged(kernel):
    x, y = inputs(1)
    views = []
    for a in (x, y, np.zeros_like(x)):
        raw = aligned_empty((a.size + 1,))
        v = raw[1:].reshape(a.shape)  # 4 bytes past a 64-byte boundary
        v[...] = a
        views.append(v)
    kernel(*views)
    np.testing.assert_allclose(views[2], 2 * x + y, rtol=1e-6)


def test_bind_reuses_prebuilt_pointers(kernel):
    x, y = (aligned_empty((8, 64)) for _ in range(2))
    x[...], y[...] = inputs(2)
    z = aligned_empty((8, 64))
    call = kernel.bind(x, y, z)
    z.fill(0)
    call()
    np.testing.assert_allclose(z, 2 * x + y, rtol=1e-6)
    x += 1  # bound to the arrays, not to their values
    call()
    np.testing.assert_allclose(z, 2 * x + y, rtol=1e-6)
    with pytest.raises(ValueError):
        kernel.bind(x, y, z[:4])


def test_call_overhead_is_printed():
    """Per-call cost of a serial kernel on tiny arrays, for the report (not asserted)."""
    t0 = time.perf_counter()
    k = compile_llvm(axpy_func(parallel=False), host_target())
    build = time.perf_counter() - t0
    x, y = (aligned_empty((8, 64)) for _ in range(2))
    x[...], y[...] = inputs(3)
    z = aligned_empty((8, 64))
    call = k.bind(x, y, z)
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        k(x, y, z)
    direct = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    bound = (time.perf_counter() - t0) / n
    print(f"\ncompile {build * 1e3:.0f} ms; call {direct * 1e6:.1f} us, bound {bound * 1e6:.1f} us")
    np.testing.assert_allclose(z, 2 * x + y, rtol=1e-6)


def test_process_with_parallel_kernel_exits_cleanly(tmp_path):
    """Object code built here loads and runs in another process (builder -> runner), and
    libgomp's pool threads and the JIT engines do not trip over each other at exit."""
    artifact = tmp_path / "axpy.pkl"
    artifact.write_bytes(pickle.dumps(compile_llvm_object(axpy_func(), host_target())))
    code = textwrap.dedent("""
        import gc, pickle, sys
        import numpy as np
        sys.path.insert(0, %r)
        from tests.codegen.test_llvm_runtime import axpy_func, host_target, inputs
        from autotune.codegen.llvm.compiler import compile_llvm_object
        from autotune.codegen.llvm.runtime import compile_llvm, load_cpu_kernel
        source, binary = pickle.loads(open(%r, "rb").read())
        k = load_cpu_kernel(axpy_func(), host_target(), source, binary)
        x, y = inputs()
        z = np.zeros_like(x)
        for _ in range(50):
            k(x, y, z)
        assert np.allclose(z, 2 * x + y)
        del k  # an engine freed while the pool threads idle, then a second kernel
        gc.collect()
        k2 = compile_llvm(axpy_func(), host_target())
        z[...] = 0
        k2(x, y, z)
        assert np.allclose(z, 2 * x + y)
        print("ok")
    """ % (str(REPO), str(artifact)))
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    for _ in range(3):
        res = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, res.stderr
        assert res.stdout.strip() == "ok"


def test_inputs_may_share_memory(kernel):
    x, _ = inputs(4)
    z = np.zeros_like(x)
    kernel(x, x, z)  # only written arrays must not overlap others
    np.testing.assert_allclose(z, 3 * x, rtol=1e-6)


def test_partial_binds_weights_once_and_takes_pointers(kernel):
    x, y = inputs(3)
    ya = aligned_empty(y.shape)
    ya[...] = y
    call = kernel.partial({1: ya})
    assert call.free == (0, 2)
    xa, z = aligned_empty(x.shape), aligned_empty(x.shape)
    xa[...] = x
    call(xa.ctypes.data, z.ctypes.data)
    np.testing.assert_allclose(z, 2 * x + y, rtol=1e-6)
    ya[...] = 0  # the fixed argument is read where it lies, at each call
    call(xa.ctypes.data, z.ctypes.data)
    np.testing.assert_allclose(z, 2 * x, rtol=1e-6)
    with pytest.raises(TypeError, match="2 pointers expected"):
        call(xa.ctypes.data)


def test_partial_refuses_what_cannot_be_fixed(kernel):
    x, y = inputs()
    with pytest.raises(ValueError, match="cannot be fixed"):
        kernel.partial({2: aligned_empty((8, 64))})  # the output
    with pytest.raises(ValueError, match="shape"):
        kernel.partial({1: aligned_empty((8, 63))})
    raw = np.empty(8 * 64 + 1, dtype=np.float32)
    offset = 0 if raw.ctypes.data % 64 else 1  # a view that starts off the 64-byte grid
    with pytest.raises(ValueError, match="aligned"):
        kernel.partial({1: raw[offset:offset + 8 * 64].reshape(8, 64)})
