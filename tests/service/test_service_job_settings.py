"""A job's measure options: kept with the job where this host measures, refused on a Ray
cluster (its workers time with their own settings), and one executor per set of them."""
from __future__ import annotations

import pytest
from fastapi.exceptions import RequestValidationError

from autotune.service.executors import ExecutorPool
from autotune.service.schemas import JobCreate
from autotune.service.validation import check_job
from autotune.target import Target
from tests.service.service_helpers import SMALL_MATMUL

BODY = {"workload": SMALL_MATMUL, "tuner": "random", "measure_options": {"repeat": 3}}


def test_measure_options_are_kept_where_this_host_measures() -> None:
    spec = check_job(JobCreate.model_validate(BODY), measured_here=True)
    assert spec.options["measure_options"] == {"repeat": 3}


def test_measure_options_are_refused_on_a_ray_cluster() -> None:
    with pytest.raises(RequestValidationError) as err:
        check_job(JobCreate.model_validate(BODY), measured_here=False)
    assert err.value.errors()[0]["loc"] == ("body", "measure_options")
    spec = check_job(JobCreate.model_validate({**BODY, "measure_options": {}}),
                     measured_here=False)
    assert spec.options["measure_options"] == {}


def test_the_pool_makes_one_executor_per_target_and_options() -> None:
    made: list[dict] = []
    pool = ExecutorPool(lambda target, measure: made.append(dict(measure)) or object())
    target = Target("llvm")
    first = pool.get(target, {"repeat": 3})
    assert pool.get(target, {"repeat": 3}) is first and pool.get(target) is not first
    assert made == [{"repeat": 3}, {}] and len(pool.executors()) == 2
    assert pool.device_lock(target) is first.lock is pool.get(target).lock  # one device


def test_a_jobs_measure_options_go_over_the_settings() -> None:
    from autotune.service.main import executor_factory_of
    from autotune.settings import Settings

    make = executor_factory_of(Settings(repeat=7, run_timeout=4.0))
    executor = make(Target("llvm"), {"repeat": 3})
    try:
        assert (executor.options.repeat, executor.options.run_timeout) == (3, 4.0)
    finally:
        executor.close()
