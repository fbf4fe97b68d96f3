"""The REST API takes a workload's prepacked form as its own workload: validated at its
field, shown on the job, and with records of its own."""
from __future__ import annotations

import json

import pytest

from tests.service.service_helpers import SMALL_MATMUL
from tests.service.test_service_api import _job, _key, _wait_state, serve  # noqa: F401

pytestmark = pytest.mark.timeout(120)
PACKED = {**SMALL_MATMUL, "prepacked": True}
DEPTHWISE = {"op": "depthwise_conv2d", "params": {"N": 1, "C": 4, "H": 8, "W": 8, "R": 3,
                                                  "S": 3, "stride": 1, "pad": 1}}


@pytest.mark.parametrize("workload", [{**DEPTHWISE, "prepacked": True},
                                      {**SMALL_MATMUL, "prepacked": 1}])
def test_a_bad_prepacked_field_is_a_422_at_it(serve, workload) -> None:  # noqa: F811
    client = serve()
    response = client.post("/api/v1/jobs", json={"workload": workload}, headers=_key(client))
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "workload", "prepacked"]


def test_a_prepacked_job_records_apart_from_the_usual_form(serve) -> None:  # noqa: F811
    client = serve()
    job = _job(client, _key(client), workload=PACKED, trials=8)
    assert job["workload"]["prepacked"] is True
    assert job["label"] == "matmul(M=64,N=64,K=64) prepacked"
    _wait_state(client, job["id"], "done")
    best = client.get("/api/v1/best", params={"workload": json.dumps(PACKED)})
    assert best.status_code == 200 and best.json()["workload"]["prepacked"] is True
    usual = client.get("/api/v1/best", params={"workload": json.dumps(SMALL_MATMUL)})
    assert usual.status_code == 404, usual.text
