"""Fixtures of the CUDA tests: nvcc (skip with a reason when absent, fail under CI=true,
whose machines have it) and a CUDA device (tests marked ``cuda_device`` skip unless pycuda
finds a GPU)."""
from __future__ import annotations

import os

import pytest

from autotune.codegen.cuda.nvcc import find_nvcc


@pytest.fixture(scope="session")
def nvcc() -> str:
    path = find_nvcc()
    if path is None:
        reason = "nvcc not found (PATH, $CUDA_HOME, /usr/local/cuda): CUDA compile tests skipped"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def gpu():
    """pycuda's driver module with a current context, or skip saying why there is none."""
    from autotune.codegen.cuda.runtime import NoCudaDevice, cuda_device
    try:
        return cuda_device(0)
    except NoCudaDevice as e:
        pytest.skip(str(e))

