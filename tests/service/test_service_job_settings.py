"""A job's measure options: kept with the job where this host measures, refused on a Ray
cluster (its workers time with their own settings), and one executor per set of them."""
from __future__ import annotations

import pytest
from fastapi.exceptions import RequestValidationError

from autotune.job_options import MEASURE_BOUNDS, MEASURE_FIELDS, MeasureOverrides
from autotune.service.executors import ExecutorPool
from autotune.service.schemas import JobCreate
from autotune.service.validation import check_job
from autotune.target import Target
from tests.service.service_helpers import SMALL_MATMUL

BODY = {"workload": SMALL_MATMUL, "tuner": "random", "measure_options": {"repeat": 3}}


def test_measure_options_are_kept_where_this_host_measures() -> None:
    spec = check_job(JobCreate.model_validate(BODY), measured_here=True)
    assert spec.options.measure.given() == {"repeat": 3}
    assert spec.options.to_json()["measure_options"] == {"repeat": 3}


def test_measure_options_are_refused_on_a_ray_cluster() -> None:
    with pytest.raises(RequestValidationError) as err:
        check_job(JobCreate.model_validate(BODY), measured_here=False)
    assert err.value.errors()[0]["loc"] == ("body", "measure_options")
    spec = check_job(JobCreate.model_validate({**BODY, "measure_options": {}}),
                     measured_here=False)
    assert spec.options.measure.given() == {}


def test_the_pool_makes_one_executor_per_target_and_options() -> None:
    made: list[dict] = []
    pool = ExecutorPool(lambda target, measure: made.append(measure.given()) or object())
    target = Target("llvm")
    first = pool.get(target, MeasureOverrides(repeat=3))
    assert pool.get(target, MeasureOverrides(repeat=3)) is first
    assert pool.get(target) is not first and pool.get(target, MeasureOverrides()) is not first
    assert made == [{"repeat": 3}, {}] and len(pool.executors()) == 2
    assert pool.device_lock(target) is first.lock is pool.get(target).lock  # one device


def test_a_jobs_measure_options_go_over_the_settings() -> None:
    from autotune.service.main import executor_factory_of
    from autotune.settings import Settings

    make = executor_factory_of(Settings(repeat=7, run_timeout=4.0))
    executor = make(Target("llvm"), MeasureOverrides(repeat=3))
    try:
        assert (executor.options.repeat, executor.options.run_timeout) == (3, 4.0)
    finally:
        executor.close()


def test_each_measure_option_is_published_and_walked_at_its_bounds(tmp_path) -> None:
    """Through the REST API: each option's bounds are in the schema; at a bound the job is
    accepted, one past it is a 422 naming the option."""
    from fastapi.testclient import TestClient

    from autotune.service.main import create_app
    from autotune.settings import Settings
    from tests.measure.test_measure_option_bounds import edges

    settings = Settings(db_url=f"sqlite:///{tmp_path / 'api.db'}", max_concurrent_jobs=1)
    app = create_app(settings, tune_fn=lambda *args, **kwargs: None,
                     executor_factory=lambda target, measure: object())
    with TestClient(app, base_url="http://localhost") as client:
        schema = client.get("/openapi.json").json()["components"]["schemas"]
        published = schema["MeasureOptionsIn"]["properties"]
        headers = {"Authorization": f"Bearer {app.state.db.create_api_key('tests')}"}
        for name in MEASURE_FIELDS:
            bound = MEASURE_BOUNDS[name]
            number = next(s for s in published[name]["anyOf"] if s.get("type") != "null")
            assert (number["minimum"], number["maximum"]) == (bound.minimum, bound.maximum)
            inside, outside = edges(name)
            for value in inside:
                r = client.post("/api/v1/jobs", headers=headers, json={
                    **BODY, "measure_options": {name: value}})
                assert r.status_code == 201, r.text
                assert r.json()["measure_options"] == {name: value}
                client.post(f"/api/v1/jobs/{r.json()['id']}/cancel", headers=headers)
            for value in outside[:2]:  # JSON has no NaN or infinity
                r = client.post("/api/v1/jobs", headers=headers, json={
                    **BODY, "measure_options": {name: value}})
                assert r.status_code == 422, r.text
                assert [e["loc"] for e in r.json()["detail"]] == [
                    ["body", "measure_options", name]]
