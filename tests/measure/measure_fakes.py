"""Fake workloads, build functions and kernels for the measurement tests.

They live in a module (not a test file) because spawned builder and runner processes
import them by name. A candidate's config is a mode string that says how it misbehaves.
"""
from __future__ import annotations

import ctypes
import os
import time
from dataclasses import dataclass

import numpy as np

from autotune.codegen.backend import Artifact
from autotune.driver import InvalidConfig
from autotune.ir.expr import INT, Const, Var
from autotune.ir.stmt import Buffer, For, ForKind, PrimFunc, Store


@dataclass(frozen=True)
class CopyWorkload:
    """``out[i] = A[i]``: the smallest workload with an input, an output and a reference."""

    n: int = 256

    @property
    def key(self) -> str:
        return f'{{"op":"copy","n":{self.n}}}'

    def random_args(self, seed: int) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        a = rng.uniform(0.5, 1.0, self.n).astype(np.float32)
        return [a, np.full(self.n, np.nan, np.float32)]

    def reference(self, args: list[np.ndarray]) -> np.ndarray:
        return np.array(args[0], dtype=np.float32)

    def flops(self) -> int:
        return self.n


def copy_func(n: int) -> PrimFunc:
    """The loop AST of ``out[i] = A[i]``, built by hand."""
    a, out, i = Buffer("A", (n,)), Buffer("out", (n,)), Var("i")
    return PrimFunc("copy", (a, out), For(i, n, ForKind.SERIAL, Store(out, (i,), a[i])))


def fake_build(workload: CopyWorkload, target: object, config: str) -> Artifact:
    """Build behaviours: 'invalid', 'compile_error', 'build_hang', 'build_crash'; any other
    mode becomes an artifact whose source names the kernel's behaviour."""
    if config == "invalid":
        raise InvalidConfig("tile 7 does not divide 256")
    if config == "compile_error":
        raise RuntimeError("codegen exploded")
    if config == "build_hang":
        time.sleep(3600)
    if config == "build_crash":
        os.abort()
    return Artifact(copy_func(workload.n), "fake", config, b"", 0.001)


class FakeKernel:
    """Behaves as its mode says: 'copy', 'zeros', 'segfault', 'hang', 'raise',
    'sleep:<seconds>' (a correct copy that takes that long per call)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def __call__(self, a: np.ndarray, out: np.ndarray) -> None:
        mode = self.mode
        if mode == "segfault":
            ctypes.string_at(0)
        elif mode == "hang":
            while True:
                time.sleep(1)
        elif mode == "raise":
            raise ValueError("kernel refused")
        elif mode == "zeros":
            out[:] = 0
        else:
            if mode.startswith("sleep:"):
                time.sleep(float(mode.split(":")[1]))
            out[:] = a


class BindKernel(FakeKernel):
    """A FakeKernel that also offers ``bind`` (as CpuKernel does) and counts its calls."""

    calls = 0

    def bind(self, a: np.ndarray, out: np.ndarray):
        def run() -> None:
            BindKernel.calls += 1
            self(a, out)
        return run


class EventKernel(FakeKernel):
    """A FakeKernel with a ``time`` method, as a CUDA kernel with events offers."""

    def time(self, arrays, number: int, repeat: int) -> list[float]:
        return [1e-3] * repeat  # pretend 1 ms per call: 20 calls make a repeat


def fake_load(artifact: Artifact, target: object) -> FakeKernel:
    mode = artifact.source
    if mode.startswith("bind"):
        return BindKernel(mode.partition(":")[2] or "copy")
    if mode == "events":
        return EventKernel("copy")
    return FakeKernel(mode)


def crash_func(n: int) -> PrimFunc:
    """A kernel storing 2**40 elements past its output: it segfaults the process."""
    a, out, i = Buffer("A", (n,)), Buffer("out", (n,)), Var("i")
    far = Const(2**40, INT)
    return PrimFunc("crash", (a, out), For(i, n, ForKind.SERIAL, Store(out, (far,), a[i])))


def hand_build(workload: CopyWorkload, target: object, config: str) -> Artifact:
    """Compile a hand-made loop AST ('copy' or 'crash') with the real LLVM code generator."""
    from autotune.codegen.llvm.compiler import compile_llvm_object
    t0 = time.perf_counter()
    func = crash_func(workload.n) if config == "crash" else copy_func(workload.n)
    source, binary = compile_llvm_object(func, target)
    return Artifact(func, target.key, source, binary, time.perf_counter() - t0)


def busy_child(conn: object) -> None:
    """A child main that says ready and then never reads its pipe (as a kernel being timed)."""
    conn.send(("ready", os.getpid()))  # type: ignore[attr-defined]
    time.sleep(3600)
