"""Both code generators implement ``Backend``: compile to a picklable ``Artifact``, load it
into a ``Kernel``, call that on arrays (CUDA: nvcc compiles here; it runs only on a GPU)."""
from __future__ import annotations

import inspect
import pickle
from types import SimpleNamespace

import numpy as np
import pytest

import autotune
from autotune import driver
from autotune.codegen import backend_for
from autotune.codegen.backend import Artifact, Backend
from autotune.codegen.kernel import Kernel
from autotune.target import Target

TARGETS = {"llvm": "llvm", "cuda": "cuda -arch=sm_90"}
MATMUL = dict(M=13, N=37, K=11)


@pytest.mark.parametrize("kind", list(TARGETS))
def test_backends_have_the_protocol_methods(kind):
    backend = backend_for(Target(TARGETS[kind]))
    assert backend.kind == kind
    for name in ("source", "compile", "load"):
        want = list(inspect.signature(getattr(Backend, name)).parameters)[1:]  # without self
        assert list(inspect.signature(getattr(backend, name)).parameters) == want, name


def test_unknown_target_kind_has_no_backend():
    with pytest.raises(ValueError, match="no code generator for target kind 'tpu'"):
        backend_for(SimpleNamespace(kind="tpu"))


def _compiled(target: Target) -> tuple[autotune.Workload, Artifact]:
    """A small matmul compiled for ``target``, after a pickle round trip (builder to runner)."""
    wl = autotune.workload("matmul", epilogue=("bias", "relu"), **MATMUL)
    artifact = backend_for(target).compile(driver.lower(wl, target), target)
    assert isinstance(artifact, Artifact) and artifact.target_key == target.key
    assert artifact.binary[:4] == b"\x7fELF" and artifact.build_s > 0
    return wl, pickle.loads(pickle.dumps(artifact))


def test_llvm_backend_compiles_loads_and_runs():
    target = Target(TARGETS["llvm"])
    wl, artifact = _compiled(target)
    assert "define" in artifact.source
    kernel = backend_for(target).load(artifact, target)
    assert isinstance(kernel, Kernel)
    args = wl.random_args(0)
    ref = wl.reference(args)
    kernel(*args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4)


def test_cuda_backend_compiles_and_loads():
    from autotune.codegen.cuda.nvcc import find_nvcc
    from autotune.codegen.cuda.runtime import NoCudaDevice, cuda_device
    if find_nvcc() is None:
        pytest.skip("nvcc not found: the CUDA backend cannot compile here")
    target = Target(TARGETS["cuda"])
    wl, artifact = _compiled(target)
    assert "__global__" in artifact.source
    kernel = backend_for(target).load(artifact, target)  # lazy: needs no device yet
    assert isinstance(kernel, Kernel)
    args = wl.random_args(0)
    try:
        cuda_device(0)
    except NoCudaDevice:
        with pytest.raises(NoCudaDevice):
            kernel(*args)
        return
    ref = wl.reference(args)
    kernel(*args)
    np.testing.assert_allclose(args[-1], ref, rtol=1e-4, atol=1e-4)
