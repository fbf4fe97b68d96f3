"""Fixtures of the cluster tests: one Ray head per test module and `autotune worker`s per test.

Ray is the ``cluster`` extra (`make test` installs it); without it these tests skip, or fail
when CI=true.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from tests.cluster.cluster_helpers import Head, WorkerProc

try:
    import ray  # noqa: F401
except ImportError:  # pragma: no cover - the extra is installed by make test
    if os.environ.get("CI") == "true":
        raise
    pytest.skip("ray is not installed (pip install autotune[cluster])", allow_module_level=True)


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    """A Ray head on this machine; this test process joins it as a driver."""
    import ray

    from autotune.cluster.registry import connect

    workdir = tmp_path_factory.mktemp("ray")
    started = Head(workdir).start()
    connect(started.address)
    try:
        yield started
    finally:
        ray.shutdown()
        started.stop()


@pytest.fixture
def workers(head: Head, tmp_path: Path) -> Iterator[Callable[..., list[WorkerProc]]]:
    """Start `autotune worker`s with the given arguments, one after the other (nodes joining
    at once from one address can miss each other's registration); stopped after."""
    started: list[WorkerProc] = []

    def start(*args: str, count: int = 1, **env: Any) -> list[WorkerProc]:
        procs = []
        for _ in range(count):
            proc = WorkerProc(head.address, list(args), tmp_path, f"{len(started)}",
                              {k: str(v) for k, v in env.items()})
            started.append(proc)
            procs.append(proc.spawn().wait_ready())
        return procs

    yield start
    for proc in started:
        proc.stop()
