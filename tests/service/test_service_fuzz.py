"""schemathesis against a live `autotune serve`: requests generated from its /openapi.json,
for every operation, valid and invalid, with every check: no 5xx, no answer that breaks the
schema, no hang, every schema-invalid request refused and every schema-valid one accepted.
A bounded number of examples per operation and a fixed seed keep it within the suite's budget.

A schema-valid request may still be refused (422) where the check needs more than a JSON
schema can say, and only there: the size of an op's arrays and its checks across parameters
(a window larger than the padded image), the target (the host's CPU features, an op or dtype
it refuses) and a tuner's own options (`SEMANTIC`); never for what the schema states (an
op's parameters, which are required, their bounds, the target's kind and options, the
measurement options' bounds: `STATED`).
Jobs the fuzzer manages to submit are cancelled at once, so that the server does not spend the
run tuning them; event streams of this server close after a second.
"""
from __future__ import annotations

import copy
import re
from typing import Any, Iterator, Optional

import jsonschema
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.specs.openapi.checks import positive_data_acceptance

from autotune.ops import EPILOGUE_STAGES
from tests.service.service_helpers import SMALL_MATMUL, Server, create_key, wait_for

pytestmark = pytest.mark.timeout(600)

EXAMPLES = 30  # per operation

# Where a schema-valid request may get a 422: fields checked against tables a JSON schema
# does not hold (see the module docstring). Anything else refused is a schema that lies.
# (A job's dtype is refused by its target: a half dtype on a CPU target; so is its op:
# max_pool2d on a cuda target; and its layout: NHWC on sm_90a's half convs only, blocked
# layouts on llvm only, two layouts for conv2d only.)
SEMANTIC = (("body", "workload", "params"), ("body", "workload", "dtype"),
            ("body", "workload", "op"), ("body", "workload", "layout"), ("body", "target"),
            ("body", "tuner_options"),
            ("query", "workload", "params"), ("query", "target"))
# What the published schema states: a 422 saying one of these to a schema-valid request is
# a schema looser than validation (the two classes issue 37 found: an op's parameters were
# not required per op, and a target of any kind was schema-valid).
STATED = ("missing parameter", "unknown parameter", "must be an integer", "unknown kind",
          "unknown option", "needs a value", "must be letters")


def accepts_positive_data(ctx: Any, response: Any, case: Any) -> Optional[bool]:
    """schemathesis's positive data acceptance, but for a 422 whose every error names a
    `SEMANTIC` field for a reason the schema does not state."""
    if response.status_code == 422 and case.meta is not None \
            and case.meta.generation.mode.is_positive:
        errors = response.json().get("detail", [])
        locs = [tuple(e.get("loc", ())) for e in errors]
        if locs and all(any(loc[:len(p)] == p for p in SEMANTIC) for loc in locs) and \
                not any(phrase in str(e.get("msg", "")) for e in errors for phrase in STATED):
            return None
    return positive_data_acceptance(ctx, response, case)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A server with one finished job (so that ids and pages have something to find)."""
    tmp = tmp_path_factory.mktemp("fuzz")
    server = Server(f"sqlite:///{tmp / 'autotune.db'}", tmp,
                    {"AUTOTUNE_EVENT_STREAM_LIFETIME_S": "1"})
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
schema = schemathesis.openapi.from_dict(copy.deepcopy(OPENAPI))


def test_the_live_server_publishes_the_fuzzed_schema(live: tuple[Server, str]) -> None:
    server, _ = live
    with server.client() as c:
        assert c.get("/openapi.json").json() == OPENAPI


def test_the_schema_states_what_validation_enforces() -> None:
    """The three places a fuzzer found schema-valid requests refused: epilogue stages are an
    enum, Last-Event-ID an integer of the id range, /best's workload JSON of a workload."""
    workload = OPENAPI["components"]["schemas"]["WorkloadIn"]["properties"]
    assert workload["epilogue"]["items"]["enum"] == list(EPILOGUE_STAGES)
    assert EPILOGUE_STAGES[:5] == ("bias", "scale_shift", "residual", "relu", "relu6")
    chain = jsonschema.Draft202012Validator(workload["epilogue"])
    assert chain.is_valid(["scale_shift", "residual", "relu"])  # ResNet's block
    assert not chain.is_valid(["bias", "scale_shift"]) and not chain.is_valid(["relu", "relu"])
    assert not chain.is_valid(["silu", "hardswish"]) and chain.is_valid(["bias", "gelu"])
    events = OPENAPI["paths"]["/api/v1/jobs/{job_id}/events"]["get"]["parameters"]
    header = next(p for p in events if p["in"] == "header")
    assert header["name"].lower() == "last-event-id"
    assert {k: header["schema"][k] for k in ("type", "minimum", "maximum")} == {
        "type": "integer", "minimum": 0, "maximum": 2**63 - 1}
    best = OPENAPI["paths"]["/api/v1/best"]["get"]["parameters"]
    query = next(p for p in best if p["name"] == "workload")
    assert query["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/WorkloadIn"}


def test_the_schema_requires_each_ops_params_and_a_known_target_kind() -> None:
    """What issue 37 found schema-valid and refused: a conv2d without its params, and a
    target of an unknown kind; and each measurement option's bounds."""
    import re

    from autotune.job_options import MEASURE_BOUNDS, MEASURE_FIELDS
    from autotune.ops import OPS

    schemas = OPENAPI["components"]["schemas"]
    workload = jsonschema.Draft202012Validator(schemas["WorkloadIn"])
    assert not workload.is_valid({"op": "conv2d"})
    assert not workload.is_valid({"op": "conv2d", "params": {"N": 1}})
    conv = {"N": 1, "C": 8, "H": 8, "W": 8, "K": 8, "R": 3, "S": 3, "stride": 1, "pad": 1}
    assert workload.is_valid({"op": "conv2d", "params": conv})
    assert not workload.is_valid({"op": "conv2d", "params": {**conv, "M": 8}})
    assert not workload.is_valid({"op": "max_pool2d", "epilogue": ["relu"], "params": {
        "N": 1, "C": 8, "H": 8, "W": 8, "R": 3, "S": 3, "stride": 1, "pad": 1}})
    branches = schemas["WorkloadIn"]["oneOf"]
    assert [b["properties"]["op"]["const"] for b in branches] == list(OPS)
    for branch in branches:
        required = [p.name for p in OPS[branch["properties"]["op"]["const"]].params
                    if p.required]
        assert branch["properties"]["params"]["required"] == required
    best = OPENAPI["paths"]["/api/v1/best"]["get"]["parameters"]
    target = next(p for p in best if p["name"] == "target")["schema"]
    job_target = schemas["JobCreate"]["properties"]["target"]
    assert target["pattern"] == job_target["pattern"]
    for spec, ok in (("llvm", True), ("cuda -arch=sm_90", True), ("tpu", False),
                     ("llvm -arch=sm_90", False), ("cuda -cores=2", False)):
        assert bool(re.fullmatch(target["pattern"], spec)) == ok, spec
    measure = schemas["MeasureOptionsIn"]
    assert measure["additionalProperties"] is False and tuple(measure["properties"]) == \
        MEASURE_FIELDS
    for name in MEASURE_FIELDS:
        (number,) = [s for s in measure["properties"][name]["anyOf"] if s["type"] != "null"]
        assert (number["minimum"], number["maximum"]) == (MEASURE_BOUNDS[name].minimum,
                                                          MEASURE_BOUNDS[name].maximum)


def test_the_schema_gives_each_op_its_layouts_and_prepacked_form() -> None:
    """Blocked layouts for the ops that have them, two layouts and NHWC for conv2d only,
    and a depthwise conv's prepacked form only when it is blocked, as validation says."""
    valid = jsonschema.Draft202012Validator(OPENAPI["components"]["schemas"]["WorkloadIn"]) \
        .is_valid
    window = {"N": 1, "C": 16, "H": 8, "W": 8, "R": 3, "S": 3, "stride": 1, "pad": 1}
    conv = {"op": "conv2d", "params": {**window, "K": 16}}
    pool = {"op": "max_pool2d", "params": window}
    gate = {"op": "channel_mul", "params": {"N": 1, "C": 16, "H": 8, "W": 8}}
    dw = {"op": "depthwise_conv2d", "params": window}
    mm = {"op": "matmul", "params": {"M": 16, "N": 16, "K": 16}}
    for body, layout, ok in ((conv, "NCHW>NCHW16c", True), (conv, "NHWC", True),
                             (pool, "NCHW16c", True), (gate, "NCHW8c", True),
                             (pool, "NCHW>NCHW16c", False), (dw, "NHWC", False),
                             (mm, "NCHW16c", False), (conv, "NCHW1c", False)):
        assert valid({**body, "layout": layout}) == ok, (body["op"], layout)
    assert valid({**dw, "layout": "NCHW16c", "prepacked": True})
    assert not valid({**dw, "prepacked": True})
    assert not valid({**dw, "layout": "NCHW", "prepacked": True})
    assert not valid({**pool, "layout": "NCHW16c", "prepacked": True})
    assert valid({**conv, "prepacked": True})


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
def test_generated_requests_get_documented_answers(case: Any, live: tuple[Server, str]) -> None:
    server, key = live
    response = case.call_and_validate(base_url=server.url, timeout=20,
                                      headers={"Authorization": f"Bearer {key}"},
                                      excluded_checks=[positive_data_acceptance],
                                      additional_checks=[accepts_positive_data])
    if case.method == "POST" and case.path == "/api/v1/jobs" and response.status_code == 201:
        with server.client(key) as c:
            c.post(f"/api/v1/jobs/{response.json()['id']}/cancel")
    with server.client(timeout=10) as c:  # and the server still answers
        assert c.get("/api/v1/health").status_code == 200


def test_job_workflows_follow_the_published_links(live: tuple[Server, str]) -> None:
    """Stateful: sequences of calls joined by the schema's links (submit a job, then read,
    cancel or page it by the id it got), each answer checked as above."""
    server, key = live
    auth = {"Authorization": f"Bearer {key}"}
    calls: list[str] = []
    created: list[int] = []  # ids of the jobs it submitted
    used: list[int | None] = []  # job ids in the paths of the calls that found theirs

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": server.url, "headers": auth, "timeout": 20}

        def validate_response(self, response: Any, case: Any, additional_checks: Any = None,
                              **kwargs: Any) -> None:
            calls.append(f"{case.method} {case.path} {response.status_code}")
            if calls[-1] == "POST /api/v1/jobs 201":
                created.append(response.json()["id"])
            elif "{job_id}" in case.path and response.status_code == 200:
                # (from the URL sent: reading the case's parameters would draw again)
                found = re.search(r"/api/v1/jobs/(\d+)", response.request.url)
                used.append(int(found.group(1)) if found else None)
            case.validate_response(response, excluded_checks=[positive_data_acceptance],
                                   additional_checks=[accepts_positive_data],
                                   transport_kwargs=kwargs)

    links = OPENAPI["paths"]["/api/v1/jobs"]["post"]["responses"]["201"].get("links", {})
    assert sorted(links) == ["cancel_job", "get_job", "job_trials", "job_workers"]
    # derandomised: the draws follow the schema, so a schema change can leave a run without
    # a created job that a step then uses (the ten-stage epilogue enum did at 4 steps)
    Workflow.run(settings=settings(max_examples=25, stateful_step_count=6, deadline=None,
                                   derandomize=True, suppress_health_check=list(HealthCheck)))
    # It ran scenarios that used a job it had created: a later call found it by the id the
    # 201 gave (the seed job, id 1, is not one of them).
    assert created and set(created) & set(used), (created, used, sorted(set(calls)))
    with server.client(key) as c:  # the jobs it left behind must not keep the server busy
        for job in c.get("/api/v1/jobs", params={"limit": 500}).json()["items"]:
            if job["state"] in ("queued", "running"):
                c.post(f"/api/v1/jobs/{job['id']}/cancel")
