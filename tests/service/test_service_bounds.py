"""Every number a client sends is bounded, and every shared resource capped (issue 16).

One real server for the module, with small limits: bodies of at most 64 KiB, two queued jobs,
two event streams per client and three in all, streams that last 8 s. Two jobs are held
queued by this test process (an owner that is alive and never runs them), so the queue is
full from the start and their event streams never see the job start.
"""
from __future__ import annotations

import contextlib
import socket
import time
from typing import Any, Iterator

import httpx
import pytest

from autotune.db import Database
from autotune.db.lease import new_owner
from autotune.ops import Workload
from autotune.target import Target
from tests.service.service_helpers import SMALL_MATMUL, Server, create_key, events

LIMITS = {"AUTOTUNE_MAX_BODY_BYTES": str(64 * 1024), "AUTOTUNE_MAX_QUEUED_JOBS": "2",
          "AUTOTUNE_MAX_EVENT_STREAMS_PER_CLIENT": "2", "AUTOTUNE_MAX_EVENT_STREAMS": "3",
          "AUTOTUNE_EVENT_STREAM_LIFETIME_S": "8"}
HUGE = str(10**20)          # beyond int64
DIGITS = "9" * 5000         # beyond Python's int-string conversion limit (4300 digits)


class Service:
    def __init__(self, server: Server, key: str, held: list[int]) -> None:
        self.server, self.key, self.held = server, key, held

    def client(self, timeout: float = 15.0, **kwargs: Any) -> httpx.Client:
        # A fresh connection per use: an error answer must not spoil the next request.
        return httpx.Client(base_url=self.server.url, timeout=timeout,
                            headers={"Authorization": f"Bearer {self.key}"}, **kwargs)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    workdir = tmp_path_factory.mktemp("bounds")
    url = f"sqlite:///{workdir / 'autotune.db'}"
    db = Database.open(url)
    owner = new_owner()  # this process: alive, so the server never takes its jobs over
    held = []
    for _ in range(2):
        job = db.create_job(workload=Workload.from_dict(SMALL_MATMUL), target=Target("llvm"),
                            tuner="random", trials=8, owner=owner, lease_s=3600)
        db.set_job_waiting(job.id, owner, "held by the test")
        held.append(job.id)
    db.dispose()
    server = Server(url, workdir, LIMITS)
    try:
        key = create_key(url)
        server.start()
        yield Service(server, key, held)
    finally:
        server.stop()


def _detail_locs(response: httpx.Response) -> list[list[Any]]:
    detail = response.json()["detail"]
    assert isinstance(detail, list), detail
    return [list(item["loc"]) for item in detail]


def _job(**fields: Any) -> dict[str, Any]:
    return {"workload": SMALL_MATMUL, "trials": 1, "tuner": "random", **fields}


# -- ids, offsets, event ids ----------------------------------------------------------------

@pytest.mark.parametrize("path", ["", "/trials", "/workers", "/curves", "/top", "/events"])
def test_ids_beyond_int64_are_4xx(service: Service, path: str) -> None:
    with service.client() as c:
        r = c.get(f"/api/v1/jobs/{HUGE}{path}")
    assert r.status_code in (404, 422), r.text
    with service.client() as c:
        r = c.post(f"/api/v1/jobs/{HUGE}/cancel")
    assert r.status_code in (404, 422), r.text


@pytest.mark.parametrize("path, param", [("/api/v1/jobs", "offset"),
                                         ("/api/v1/jobs/{job}/trials", "offset"),
                                         ("/api/v1/jobs/{job}/events", "after")])
def test_huge_query_numbers_are_422(service: Service, path: str, param: str) -> None:
    url = path.format(job=service.held[0])
    for value in (HUGE, DIGITS):
        with service.client() as c:
            r = c.get(url, params={param: value})
        assert r.status_code == 422, r.text
        assert ["query", param] in _detail_locs(r)


def test_huge_last_event_id_is_422(service: Service) -> None:
    for value in (HUGE, DIGITS):
        with service.client() as c:
            r = c.get(f"/api/v1/jobs/{service.held[0]}/events",
                      headers={"Last-Event-ID": value})
        assert r.status_code == 422, r.text
        assert ["header", "last-event-id"] in _detail_locs(r)


# -- JSON that Python's parser chokes on ----------------------------------------------------

def test_best_workload_query_nested_or_huge_is_422(service: Service) -> None:
    nested = "[" * 5000
    digits = '{"op": "matmul", "params": {"M": ' + DIGITS + ', "N": 8, "K": 8}}'
    for text in (nested, digits):
        with service.client() as c:
            r = c.get("/api/v1/best", params={"workload": text})
        assert r.status_code == 422, r.text
        assert ["query", "workload"] in _detail_locs(r)


def test_json_body_nested_or_huge_is_422_at_body(service: Service) -> None:
    digits = '{"workload": {"op": "matmul", "params": {"M": ' + DIGITS + ', "N": 8, "K": 8}}}'
    nested = '{"workload": ' + "[" * 5000 + "]" * 5000 + "}"
    for text in (digits, nested):
        with service.client() as c:
            r = c.post("/api/v1/jobs", content=text,
                       headers={"Content-Type": "application/json"})
        assert r.status_code == 422, r.text
        assert ["body"] in _detail_locs(r)


# -- workload sizes -------------------------------------------------------------------------

@pytest.mark.parametrize("workload, field", [
    # np.prod wrapped this to 48 elements; factoring M then took minutes
    ({"op": "matmul", "params": {"M": 2**61 - 1, "N": 8, "K": 8}}, "M"),
    # 2**28 elements exactly, but 1.6 TFLOP per call
    ({"op": "matmul", "params": {"M": 8192, "N": 8192, "K": 12288}}, None),
    # small arrays, but 2**21 output channels for the space to split
    ({"op": "depthwise_conv2d", "params": {"N": 1, "C": 1024, "H": 1, "W": 1, "R": 1,
                                           "S": 1, "stride": 1, "pad": 0,
                                           "multiplier": 2048}}, None),
])
def test_workload_bounds(service: Service, workload: dict[str, Any], field: Any) -> None:
    with service.client(timeout=30.0) as c:
        r = c.post("/api/v1/jobs", json=_job(workload=workload))
        if r.status_code == 201:  # the bug: do not leave it running
            c.post(f"/api/v1/jobs/{r.json()['id']}/cancel")
    assert r.status_code == 422, r.text
    loc = ["body", "workload", "params"] + ([field] if field else [])
    assert loc in _detail_locs(r)


# -- tuner options --------------------------------------------------------------------------

def test_tuner_options_have_maxima(service: Service) -> None:
    with service.client() as c:
        tuners = c.get("/api/v1/tuners").json()
    numeric = [(t["name"], o) for t in tuners for o in t["options"]
               if type(o["default"]) in (int, float) and "choices" not in o]
    assert numeric
    assert [(name, o["name"]) for name, o in numeric if "maximum" not in o] == []


@pytest.mark.parametrize("tuner, options", [
    ("xgb", {"workers": 5000}), ("xgb", {"n_chains": 10**9}), ("xgb", {"n_estimators": 10**7}),
    ("ga", {"pop_size": 10**8}), ("xgb", {"temperature": 1e308}),
])
def test_tuner_options_beyond_maximum_are_422(service: Service, tuner: str,
                                              options: dict[str, Any]) -> None:
    with service.client() as c:
        r = c.post("/api/v1/jobs", json=_job(tuner=tuner, tuner_options=options))
        if r.status_code == 201:  # the bug: do not leave it running
            c.post(f"/api/v1/jobs/{r.json()['id']}/cancel")
    assert r.status_code == 422, r.text
    assert ["body", "tuner_options", next(iter(options))] in _detail_locs(r)


def test_nan_tuner_option_is_422(service: Service) -> None:
    text = '{"workload": {"op": "matmul", "params": {"M": 64, "N": 64, "K": 64}}, ' \
           '"trials": 1, "tuner": "xgb", "tuner_options": {"subsample": NaN}}'
    with service.client() as c:
        r = c.post("/api/v1/jobs", content=text, headers={"Content-Type": "application/json"})
        if r.status_code == 201:
            c.post(f"/api/v1/jobs/{r.json()['id']}/cancel")
    assert r.status_code == 422, r.text
    assert ["body", "tuner_options", "subsample"] in _detail_locs(r)


# -- request bodies -------------------------------------------------------------------------

def _raw(port: int, head: bytes, body: bytes, timeout: float = 10.0) -> bytes:
    """Send a request head and part of a body; the response head (the server must answer
    without the rest of the body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(head + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data


def test_body_over_limit_is_413_before_it_is_read(service: Service) -> None:
    port = service.server.port
    # A Content-Length of 10 GiB, of which 1 KiB is sent: answered at once, without a key.
    host = b"Host: 127.0.0.1:%d\r\n" % port
    head = (b"POST /api/v1/jobs HTTP/1.1\r\n" + host + b"Content-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % (10 << 30))
    assert _raw(port, head, b"{" + b" " * 1023).split(b" ")[1] == b"413"
    # A chunked body that passes the limit and never ends.
    head = (b"POST /api/v1/jobs HTTP/1.1\r\n" + host + b"Content-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    chunks = b"".join(b"%x\r\n%s\r\n" % (8192, b" " * 8192) for _ in range(10))
    assert _raw(port, head, chunks).split(b" ")[1] == b"413"
    # Through a client: a whole body over the limit, with its length or streamed
    # (the streamed one's answer names the body and the limit).
    with service.client() as c:
        r = c.post("/api/v1/jobs", json=_job(tuner_options={"x": "y" * (100 * 1024)}))
    assert r.status_code == 413, r.text
    with service.client() as c:
        r = c.post("/api/v1/jobs", content=iter([b"{" + b" " * 8192] * 10),
                   headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and ["body"] in _detail_locs(r), r.text
    assert "65536 bytes" in r.text
    # and one under the limit is read as usual.
    with service.client() as c:
        r = c.post("/api/v1/jobs", json=_job(tuner_options={"x": "y" * (32 * 1024)}))
    assert r.status_code == 422 and ["body", "tuner_options", "x"] in _detail_locs(r), r.text


# -- event streams --------------------------------------------------------------------------

@contextlib.contextmanager
def _stream(client: httpx.Client, job_id: int) -> Iterator[httpx.Response]:
    with client.stream("GET", f"/api/v1/jobs/{job_id}/events",
                       timeout=httpx.Timeout(14.0, connect=5.0)) as response:
        yield response


def test_event_stream_caps(service: Service) -> None:
    job = service.held[0]
    other = httpx.HTTPTransport(local_address="127.0.0.2")  # a second client address
    with contextlib.ExitStack() as stack:
        a = [stack.enter_context(service.client()) for _ in range(4)]
        b = [stack.enter_context(service.client(transport=other)) for _ in range(2)]
        first = stack.enter_context(_stream(a[0], job))
        assert first.status_code == 200
        assert stack.enter_context(_stream(a[1], job)).status_code == 200
        third = stack.enter_context(_stream(a[2], job))
        assert third.status_code == 429, third.read()
        assert "per client" in third.read().decode() and third.headers.get("retry-after")
        assert stack.enter_context(_stream(b[0], job)).status_code == 200
        full = stack.enter_context(_stream(b[1], job))
        assert full.status_code == 429 and "AUTOTUNE_MAX_EVENT_STREAMS" in full.read().decode()
        first.close()  # a client that goes frees its place
        deadline = time.monotonic() + 5
        while True:
            with _stream(a[3], job) as again:
                if again.status_code == 200 or time.monotonic() > deadline:
                    assert again.status_code == 200, again.read()
                    break
            time.sleep(0.2)


def test_event_stream_of_a_job_that_never_starts_ends_after_its_lifetime(
        service: Service) -> None:
    start = time.monotonic()
    with service.client() as c:
        seen = [(event, data) for event, _, data in events(c, service.held[1], timeout=14.0)]
    assert time.monotonic() - start < 14
    assert seen and seen[0][0] == "state" and seen[0][1]["state"] == "queued"
    assert "end" not in [event for event, _ in seen]  # closed by the lifetime, not the job


# -- the queue ------------------------------------------------------------------------------

def test_submit_beyond_the_queue_limit_is_429(service: Service) -> None:
    with service.client() as c:
        r = c.post("/api/v1/jobs", json=_job())
        if r.status_code == 201:  # the bug: do not leave it running
            c.post(f"/api/v1/jobs/{r.json()['id']}/cancel")
        assert r.status_code == 429, r.text
        assert "queue" in r.json()["detail"] and r.headers.get("retry-after")
        # one place free: accepted again
        assert c.post(f"/api/v1/jobs/{service.held[1]}/cancel").status_code == 200
        r = c.post("/api/v1/jobs", json=_job())
        assert r.status_code == 201, r.text
        c.post(f"/api/v1/jobs/{r.json()['id']}/cancel")


# -- the size checks themselves (workloads too dangerous to let a server run) -----------------

@pytest.mark.parametrize("params, field", [
    # tiny arrays, but the padded input, which a schedule may allocate, is 2**40 elements
    ({"N": 1, "C": 1, "H": 1, "W": 1, "K": 1, "R": 1, "S": 1, "stride": 2**20,
      "pad": 2**19}, None),
    ({"N": 1, "C": 1, "H": 2**21, "W": 1, "K": 1, "R": 1, "S": 1, "stride": 1, "pad": 0}, "H"),
])
def test_check_workload_bounds_dimensions(params: dict[str, Any], field: Any) -> None:
    from fastapi.exceptions import RequestValidationError

    from autotune.service.validation import check_workload

    with pytest.raises(RequestValidationError) as info:
        check_workload({"op": "conv2d", "params": params}, ("body", "workload"))
    loc = ("body", "workload", "params") + ((field,) if field else ())
    assert info.value.errors()[0]["loc"] == loc


def test_check_workload_takes_the_residual_stage() -> None:
    """The residual epilogue is a stage like the others: canonically ordered, and its array
    (the output's shape) counts toward the size limits."""
    from fastapi.exceptions import RequestValidationError

    from autotune.service.validation import MAX_ELEMENTS, check_workload

    conv = {"N": 1, "C": 8, "H": 14, "W": 14, "K": 16, "R": 3, "S": 3, "stride": 1, "pad": 1}
    wl = check_workload({"op": "conv2d", "params": conv, "epilogue": ["relu", "residual", "bias"]},
                        ("body", "workload"))
    assert wl.epilogue == ("bias", "residual", "relu")
    assert wl.arg_specs[3].shape == wl.output_shape
    # a 1x1 conv whose input and output each hold just under half the limit: fine alone,
    # too large with the residual (a third array of the output's size)
    side = int((MAX_ELEMENTS // 2 - 1) ** 0.5)
    big = {"N": 1, "C": 1, "H": side, "W": side, "K": 1, "R": 1, "S": 1, "stride": 1, "pad": 0}
    check_workload({"op": "conv2d", "params": big}, ("body", "workload"))
    with pytest.raises(RequestValidationError) as info:
        check_workload({"op": "conv2d", "params": big, "epilogue": ["residual"]},
                       ("body", "workload"))
    assert "elements" in info.value.errors()[0]["msg"]
