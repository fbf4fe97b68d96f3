"""Fixtures for the search tests: a synthetic space and objective, a real workload/target, a db."""
from __future__ import annotations

from typing import Iterator

import pytest

from autotune.db import Database
from autotune.ops import Workload, workload
from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective
from autotune.space import ConfigSpace
from autotune.target import Target
from tests.search.search_cases import make_space


@pytest.fixture
def space() -> ConfigSpace:
    return make_space()


@pytest.fixture
def small_space() -> ConfigSpace:
    return make_space(knobs=2, size=5)  # 25 configs


@pytest.fixture(scope="session")
def wl() -> Workload:
    return workload("matmul", M=64, N=64, K=64)


@pytest.fixture(scope="session")
def target() -> Target:
    return Target("llvm")


@pytest.fixture
def objective(space: ConfigSpace) -> SyntheticObjective:
    return SyntheticObjective(space, seed=3, fail_rate=0.1)


@pytest.fixture
def executor(objective: SyntheticObjective) -> SyntheticExecutor:
    return SyntheticExecutor(objective)


@pytest.fixture
def db(tmp_path) -> Iterator[Database]:
    database = Database.open(f"sqlite:///{tmp_path / 'tuning.db'}")
    yield database
    database.dispose()
