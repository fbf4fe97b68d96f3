"""schemathesis against a live `autotune serve`: requests generated from its /openapi.json,
for every operation, valid and invalid, find no 5xx, no answer that breaks the schema and
no hang. A bounded number of examples per operation keeps it within the suite's budget.

The event stream is left out: it is meant to stay open while a job runs (its bounds are
tested in test_service_bounds.py). Jobs the fuzzer manages to submit are cancelled at once,
so that the server does not spend the run tuning them. Left out too is the check that every
schema-valid request is accepted: a job's workload and target are checked beyond what a JSON
schema can say (an op's own parameters, the host's CPU features), with a 422 naming the field.
"""
from __future__ import annotations

import copy
from typing import Any, Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.service.service_helpers import SMALL_MATMUL, Server, create_key, wait_for

pytestmark = pytest.mark.timeout(600)

EXAMPLES = 30  # per operation


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A server with one finished job (so that ids and pages have something to find)."""
    tmp = tmp_path_factory.mktemp("fuzz")
    server = Server(f"sqlite:///{tmp / 'autotune.db'}", tmp, {})
    key = create_key(server.db_url)
    server.start()
    try:
        with server.client(key) as c:
            job = c.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": 8,
                                               "tuner": "random"}).json()
            wait_for(lambda: c.get(f"/api/v1/jobs/{job['id']}").json()["state"] == "done",
                     120, what="the seed job")
        yield server, key
    finally:
        server.stop()


def _openapi() -> dict[str, Any]:
    """The schema the server publishes (built from the app; checked against the live one)."""
    from autotune.service.main import create_app
    from autotune.settings import Settings

    return create_app(Settings(db_url="sqlite://")).openapi()


OPENAPI = _openapi()
# a copy: schemathesis adds what it infers (links between operations) to the dict it loads
schema = schemathesis.openapi.from_dict(copy.deepcopy(OPENAPI)).exclude(path_regex=r"/events$")


def test_the_live_server_publishes_the_fuzzed_schema(live: tuple[Server, str]) -> None:
    server, _ = live
    with server.client() as c:
        assert c.get("/openapi.json").json() == OPENAPI


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_generated_requests_get_documented_answers(case: Any, live: tuple[Server, str]) -> None:
    server, key = live
    response = case.call_and_validate(base_url=server.url, timeout=20,
                                      headers={"Authorization": f"Bearer {key}"},
                                      excluded_checks=[positive_data_acceptance])
    if case.method == "POST" and case.path == "/api/v1/jobs" and response.status_code == 201:
        with server.client(key) as c:
            c.post(f"/api/v1/jobs/{response.json()['id']}/cancel")
    with httpx.Client(base_url=server.url, timeout=10) as c:  # and the server still answers
        assert c.get("/api/v1/health").status_code == 200


def test_job_workflows_follow_the_published_links(live: tuple[Server, str]) -> None:
    """Stateful: sequences of calls joined by the schema's links (submit a job, then read,
    cancel or page it by the id it got), each answer checked as above."""
    server, key = live
    auth = {"Authorization": f"Bearer {key}"}
    calls: list[str] = []

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": server.url, "headers": auth, "timeout": 20}

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None,
                              **kwargs: Any) -> None:
            calls.append(f"{case.method} {case.path} {response.status_code}")
            case.validate_response(response, excluded_checks=[positive_data_acceptance],
                                   transport_kwargs=kwargs)

    links = OPENAPI["paths"]["/api/v1/jobs"]["post"]["responses"]["201"].get("links", {})
    assert sorted(links) == ["cancel_job", "get_job", "job_trials", "job_workers"]
    Workflow.run(settings=settings(max_examples=15, stateful_step_count=4, deadline=None,
                                   derandomize=True, suppress_health_check=list(HealthCheck)))
    # It ran scenarios that used a job it had created (a step after a 201 from POST /jobs).
    created = [i for i, call in enumerate(calls) if call == "POST /api/v1/jobs 201"]
    assert created and any(i + 1 < len(calls) and "{job_id}" in calls[i + 1]
                           for i in created), sorted(set(calls))
    with server.client(key) as c:  # the jobs it left behind must not keep the server busy
        for job in c.get("/api/v1/jobs", params={"limit": 500}).json()["items"]:
            if job["state"] in ("queued", "running"):
                c.post(f"/api/v1/jobs/{job['id']}/cancel")
