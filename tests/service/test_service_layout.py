"""The REST API takes conv2d's blocked layout as part of the workload: refused at the field
at fault (the layout, or the channel count the block does not divide), shown on the job."""
from __future__ import annotations

import pytest

from tests.service.test_service_api import _job, _key, serve  # noqa: F401

pytestmark = pytest.mark.timeout(120)
CONV = {"op": "conv2d", "params": {"N": 1, "C": 16, "H": 8, "W": 8, "K": 32, "R": 3, "S": 3,
                                   "stride": 1, "pad": 1}}


@pytest.mark.parametrize("workload, loc", [
    ({**CONV, "layout": "NCHW32c"}, ["body", "workload", "params", "C"]),
    ({**CONV, "layout": "NHWC"}, ["body", "workload", "layout"]),
    ({"op": "matmul", "params": {"M": 8, "N": 8, "K": 8}, "layout": "NCHW8c"},
     ["body", "workload", "layout"]),
])
def test_a_bad_layout_is_a_422_at_its_field(serve, workload, loc) -> None:  # noqa: F811
    client = serve()
    response = client.post("/api/v1/jobs", json={"workload": workload}, headers=_key(client))
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == loc


def test_a_blocked_job_is_its_own_workload(serve) -> None:  # noqa: F811
    client = serve()
    job = _job(client, _key(client), workload={**CONV, "layout": "NCHW16c"}, trials=1)
    assert job["workload"]["layout"] == "NCHW16c"
    assert job["label"].endswith(" NCHW16c")
    plain = _job(client, _key(client), workload=CONV, trials=1)
    assert "layout" not in plain["workload"]
