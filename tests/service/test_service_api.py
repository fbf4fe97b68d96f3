"""The REST API in-process (TestClient) with a fake tuning loop: validation, auth, paging,
cancel, failure and restart bookkeeping. The real loop is exercised in test_service_live."""
from __future__ import annotations

import json
import threading
import time
import warnings
from typing import Any, Callable, Iterator, Optional

import pytest

from autotune import driver
from autotune.db import Database
from autotune.measure.result import ErrorKind, MeasureResult
from autotune.ops import Workload
from autotune.service.main import create_app
from autotune.settings import Settings
from autotune.target import Target
from tests.service.service_helpers import SMALL_MATMUL, wait_for
from tests.spaces import valid_configs

with warnings.catch_warnings():  # starlette nags about httpx vs httpx2 on import
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.timeout(120)


class FakeTune:
    """Records batches of made-up measurements like the real loop (resumes by job_id)."""

    def __init__(self, batch: int = 4, gate: Optional[threading.Event] = None,
                 fail: Optional[str] = None) -> None:
        self.batch, self.gate, self.fail = batch, gate, fail
        self.calls: list[dict[str, Any]] = []

    def __call__(self, workload: Workload, target: Target, *, trials: int, db: Database,
                 job_id: int, callbacks: list[Callable[[Any], Any]], **kwargs: Any) -> None:
        self.calls.append({"job_id": job_id, "trials": trials, **kwargs})
        if self.fail:
            raise RuntimeError(self.fail)
        space = driver.config_space(workload, target)
        done = db.job_trial_count(job_id)
        taken = set(db.measured_indices(workload, target))
        while done < trials:
            configs = valid_configs(space, min(self.batch, trials - done), skip=taken)
            taken.update(c.index for c in configs)
            items = [(c, _result(done + i)) for i, c in enumerate(configs)]
            db.add_trials(workload, target, job_id, items, workload.flops())
            done += len(items)
            best = db.job_trials(job_id, limit=1, sort="-gflops")[0][0].gflops
            db.update_job_progress(job_id, trials_done=done, best_gflops=best)
            if self.gate is not None:
                self.gate.wait(10)
            if any([cb(None) is False for cb in callbacks]):
                return


def _result(index: int) -> MeasureResult:
    """The made-up measurement of a job's ``index``th trial (every fifth a failure)."""
    if index % 5 == 4:
        return MeasureResult.failure(ErrorKind.COMPILE, "made-up compile error")
    cost = 1e-4 * (1 + (index * 7919) % 13)
    return MeasureResult(costs=(cost, cost), extra={"predicted": 1.0 / cost})


@pytest.fixture
def serve(tmp_path) -> Iterator[Callable[..., TestClient]]:
    """Start the app in-process: ``serve(tune_fn, **settings)`` -> a TestClient (closed after)."""
    clients: list[TestClient] = []

    def start(tune_fn: Any = None, **fields: Any) -> TestClient:
        settings = Settings(**{"db_url": f"sqlite:///{tmp_path / 'api.db'}",
                               "max_concurrent_jobs": 1, **fields})
        app = create_app(settings, tune_fn=tune_fn or FakeTune(),
                         executor_factory=lambda target, measure: object())
        client = TestClient(app, base_url="http://localhost")  # a Host the service allows
        client.__enter__()
        clients.append(client)
        return client

    yield start
    for client in clients:
        client.__exit__(None, None, None)


def _key(client: TestClient) -> dict[str, str]:
    return {"Authorization": f"Bearer {client.app.state.db.create_api_key('tests')}"}


def _job(client: TestClient, headers: dict[str, str], **body: Any) -> dict[str, Any]:
    response = client.post("/api/v1/jobs", json={"workload": SMALL_MATMUL, "trials": 12,
                                                 "tuner": "random", **body}, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


def _wait_state(client: TestClient, job_id: int, *states: str) -> dict[str, Any]:
    def check() -> Optional[dict[str, Any]]:
        job = client.get(f"/api/v1/jobs/{job_id}").json()
        return job if job["state"] in states else None
    return wait_for(check, timeout=30, interval=0.05, what=f"job {job_id} in {states}")


def _mm(**params: Any) -> dict[str, Any]:
    return {"op": "matmul", "params": {"M": 64, "N": 64, "K": 64, **params}}


def _pool(**params: Any) -> dict[str, Any]:
    return {"op": "max_pool2d", "params": {"N": 1, "C": 8, "H": 16, "W": 16, "R": 3, "S": 3,
                                           "stride": 2, "pad": 1, **params}}


def _grouped(**params: Any) -> dict[str, Any]:
    return {"op": "group_conv2d", "params": {"N": 1, "C": 16, "H": 8, "W": 8, "K": 16, "R": 3,
                                             "S": 3, "stride": 1, "pad": 1, **params}}


@pytest.mark.parametrize("body, loc", [
    ({"workload": {"op": "nope", "params": {}}}, ["body", "workload", "op"]),
    ({"workload": _mm(K=-3)}, ["body", "workload", "params", "K"]),
    ({"workload": _mm(K="64")}, ["body", "workload", "params", "K"]),
    ({"workload": _mm(Q=2)}, ["body", "workload", "params", "Q"]),
    ({"workload": {"op": "matmul", "params": {"M": 8, "N": 8}}},
     ["body", "workload", "params", "K"]),
    ({"workload": _mm(), "trials": 0}, ["body", "trials"]),
    ({"workload": _mm(), "trials": 100_001}, ["body", "trials"]),
    ({"workload": _mm(), "tuner": "annealing"}, ["body", "tuner"]),
    ({"workload": _mm(), "target": "tpu"}, ["body", "target"]),
    ({"workload": _mm(), "target": "llvm -cores=zero"}, ["body", "target"]),
    ({"workload": _mm(), "tuner": "ga", "tuner_options": {"pop_size": "big"}},
     ["body", "tuner_options", "pop_size"]),
    ({"workload": _mm(), "measure_options": {"repeat": 0}}, ["body", "measure_options", "repeat"]),
    ({"workload": _mm(), "measure_options": {"warmup": 2}}, ["body", "measure_options", "warmup"]),
    ({"workload": {**_mm(), "dtype": "float16"}}, ["body", "workload", "dtype"]),
    ({"workload": {**_mm(), "epilogue": ["swish"]}}, ["body", "workload", "epilogue", 0]),
    ({"workload": _mm(M=1 << 20, N=1 << 20)}, ["body", "workload", "params"]),
    ({"workload": _mm(), "early_stopping": 0}, ["body", "early_stopping"]),
    ({"workload": _mm(), "colour": "red"}, ["body", "colour"]),
    ({"trials": 5}, ["body", "workload"]),
    # max_pool2d: its own bounds, no epilogue, no cuda kernel
    ({"workload": _pool(pad=2)}, ["body", "workload", "params", "pad"]),
    ({"workload": _pool(S=19)}, ["body", "workload", "params", "S"]),
    ({"workload": _pool(stride=[2, 0])}, ["body", "workload", "params", "stride"]),
    ({"workload": _pool(dilation=2)}, ["body", "workload", "params", "dilation"]),
    ({"workload": {**_pool(), "epilogue": ["relu"]}}, ["body", "workload", "epilogue"]),
    ({"workload": {**_pool(), "layout": "NCHW>NCHW8c"}}, ["body", "workload", "layout"]),
    # group_conv2d: groups divide both channel counts, and a block one group's channels
    ({"workload": _grouped(groups=3)}, ["body", "workload", "params", "groups"]),
    ({"workload": _grouped(groups=0)}, ["body", "workload", "params", "groups"]),
    ({"workload": {**_grouped(groups=4), "layout": "NCHW8c"}},
     ["body", "workload", "params", "groups"]),
])
def test_bad_submissions_name_the_field(serve, body, loc) -> None:
    client = serve()
    response = client.post("/api/v1/jobs", json=body, headers=_key(client))
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert detail[0]["loc"] == loc and detail[0]["msg"]


def test_bad_queries_name_the_field(serve) -> None:
    client = serve()
    cases = [
        ("/api/v1/best", {"workload": "{not json", "target": "llvm"}, ["query", "workload"]),
        ("/api/v1/best", {"workload": json.dumps(_mm(N=0))}, ["query", "workload", "params", "N"]),
        ("/api/v1/best", {"workload": json.dumps(_mm()), "target": "gpu"}, ["query", "target"]),
        ("/api/v1/jobs", {"state": "sleeping"}, ["query", "state"]),
        ("/api/v1/jobs", {"limit": 0}, ["query", "limit"]),
        ("/api/v1/jobs/1/trials", {"sort": "speed"}, ["query", "sort"]),
        ("/api/v1/jobs/1/trials", {"error": "oops"}, ["query", "error"]),
        ("/api/v1/jobs/abc", {}, ["path", "job_id"]),
    ]
    for path, params, loc in cases:
        response = client.get(path, params=params)
        assert response.status_code == 422, (path, params, response.text)
        assert response.json()["detail"][0]["loc"] == loc, (path, params)
    assert client.get("/api/v1/best", params={"workload": json.dumps(_mm())}).status_code == 404
    assert client.get("/api/v1/jobs/41").status_code == 404
    assert client.post("/api/v1/jobs/41/cancel", headers=_key(client)).status_code == 404


def test_auth_missing_wrong_revoked_and_disabled(serve, tmp_path) -> None:
    client = serve()
    body = {"workload": _mm(), "trials": 4}
    assert client.post("/api/v1/jobs", json=body).status_code == 401
    assert client.post("/api/v1/jobs", json=body,
                       headers={"Authorization": "Bearer at_wrong"}).status_code == 403
    db = client.app.state.db
    key = db.create_api_key("soon revoked")
    good = {"Authorization": f"Bearer {key}"}
    assert client.post("/api/v1/jobs", json=body, headers=good).status_code == 201
    db.revoke_api_key(key[:8])
    assert client.post("/api/v1/jobs", json=body, headers=good).status_code == 403
    # Reads are open by default; a key cookie never authorises a write.
    assert client.get("/api/v1/jobs").status_code == 200
    client.cookies.set("autotune_key", db.create_api_key("cookie"))
    assert client.post("/api/v1/jobs", json=body).status_code == 401


def test_reads_can_require_a_key(serve) -> None:
    client = serve(require_key_for_reads=True)
    assert client.get("/api/v1/jobs").status_code == 401
    assert client.get("/api/v1/health").status_code == 200  # liveness stays open
    assert client.get("/api/v1/jobs", headers=_key(client)).status_code == 200
    client.cookies.set("autotune_key", client.app.state.db.create_api_key("dashboard"))
    assert client.get("/api/v1/jobs").status_code == 200  # the dashboard's EventSource path


def test_auth_disabled_for_local_development(serve) -> None:
    client = serve(auth_disabled=True)
    assert client.post("/api/v1/jobs", json={"workload": _mm(), "trials": 4}).status_code == 201
    health = client.get("/api/v1/health").json()
    assert health["auth"] == "off" and health["owner"] == client.app.state.manager.owner


def test_job_lifecycle_paging_sorting_and_curves(serve) -> None:
    tune = FakeTune(batch=4)
    client = serve(tune, source_timeout_s=120)  # a loaded host makes code slowly
    headers = _key(client)
    job = _job(client, headers, trials=12, seed=5, tuner_options={})
    assert job["state"] == "queued" and job["label"] == "matmul(M=64,N=64,K=64)"
    done = _wait_state(client, job["id"], "done")
    assert done["trials_done"] == 12 and done["started_at"] and done["finished_at"]
    assert done["owner"] is None and done["waiting"] is None
    workers = client.get(f"/api/v1/jobs/{job['id']}/workers").json()["items"]
    assert workers == [{"worker": "local", "trials": 12, "failed": 2}]  # made-up: no worker ids
    assert client.get("/api/v1/jobs/41/workers").status_code == 404
    assert tune.calls[0]["job_id"] == job["id"] and tune.calls[0]["seed"] == 5
    assert tune.calls[0]["tuner"] == "random"

    page = client.get(f"/api/v1/jobs/{job['id']}/trials", params={"limit": 5}).json()
    assert page["total"] == 12 and len(page["items"]) == 5
    ids = [t["id"] for t in page["items"]]
    assert ids == sorted(ids)
    fast = client.get(f"/api/v1/jobs/{job['id']}/trials", params={"sort": "-gflops"}).json()
    gflops = [t["gflops"] for t in fast["items"] if t["gflops"] is not None]
    assert gflops == sorted(gflops, reverse=True)
    assert fast["items"][-1]["gflops"] is None  # failures sort last
    failed = client.get(f"/api/v1/jobs/{job['id']}/trials", params={"error": "compile"}).json()
    assert failed["total"] == 2 and all(t["error"] == "compile" for t in failed["items"])
    assert fast["items"][0]["predicted"] is not None

    best = client.get("/api/v1/best", params={"workload": json.dumps(SMALL_MATMUL)}).json()
    assert best["gflops"] == pytest.approx(gflops[0])
    assert best["workload"]["params"] == SMALL_MATMUL["params"]

    other = _job(client, headers, trials=8, tuner="grid")
    _wait_state(client, other["id"], "done")
    page = client.get(f"/api/v1/jobs/{job['id']}/curves", params={"siblings": "true"}).json()
    curves = page["items"]
    # the default config, trial 0 of the made-up ones, is also the fastest: nothing beat it
    default = driver.config_space(Workload.from_dict(SMALL_MATMUL), Target("llvm")).default()
    assert page["default"] == {"config_index": str(default.index), "gflops": gflops[0],
                               "retimed": False, "is_best": True}
    assert [c["job_id"] for c in curves] == [job["id"], other["id"]]
    assert curves[0]["points"][-1][0] == 12
    assert all(a[1] <= b[1] for a, b in zip(curves[0]["points"], curves[0]["points"][1:]))

    listed = client.get("/api/v1/jobs", params={"state": "done", "limit": 1}).json()
    assert listed["total"] == 2 and listed["items"][0]["id"] == other["id"]
    top = client.get(f"/api/v1/jobs/{job['id']}/top", params={"k": 3}).json()["items"]
    assert [t["rank"] for t in top] == [1, 2, 3] and top[0]["source"].startswith("def ")
    code = client.get(f"/api/v1/jobs/{job['id']}/top", params={"k": 1, "form": "source"}).json()
    assert code["form"] == "source" and len(code["items"]) == 1
    assert client.get(f"/api/v1/jobs/{job['id']}/top", params={"form": "llvm"}).status_code == 422


def test_cancel_queued_and_running_jobs(serve) -> None:
    gate = threading.Event()
    client = serve(FakeTune(batch=4, gate=gate))
    headers = _key(client)
    running = _job(client, headers, trials=40)
    queued = _job(client, headers, trials=40)
    _wait_state(client, running["id"], "running")
    assert client.post(f"/api/v1/jobs/{queued['id']}/cancel").status_code == 401
    cancelled = client.post(f"/api/v1/jobs/{queued['id']}/cancel", headers=headers).json()
    assert cancelled["state"] == "cancelled"
    stopping = client.post(f"/api/v1/jobs/{running['id']}/cancel", headers=headers).json()
    assert stopping["state"] == "cancelled"
    gate.set()  # let the current batch finish: the job stops after it
    manager = client.app.state.manager
    wait_for(lambda: not manager.is_active(running["id"]), timeout=10, what="the worker to stop")
    final = client.get(f"/api/v1/jobs/{running['id']}").json()
    assert final["state"] == "cancelled" and 0 < final["trials_done"] < 40
    assert client.get(f"/api/v1/jobs/{queued['id']}").json()["trials_done"] == 0
    # Cancelling an ended job changes nothing.
    again = client.post(f"/api/v1/jobs/{running['id']}/cancel", headers=headers).json()
    assert again["state"] == "cancelled"


def test_failed_job_records_why(serve) -> None:
    client = serve(FakeTune(fail="the compiler caught fire"))
    job = _job(client, _key(client))
    failed = _wait_state(client, job["id"], "failed")
    assert "the compiler caught fire" in failed["error"] and failed["finished_at"]


def test_restart_resumes_unfinished_jobs(serve, tmp_path) -> None:
    # Rows as a service from before leases left them: running or queued, with no owner.
    url = f"sqlite:///{tmp_path / 'api.db'}"
    db = Database.open(url)
    wl, target = Workload.from_dict(SMALL_MATMUL), Target("llvm")
    opts = {"seed": 2, "early_stopping": None, "transfer": True, "tuner_options": {}}
    was_running = db.create_job(workload=wl, target=target, tuner="random", trials=10,
                                options=opts)
    db.set_job_state(was_running.id, "running")
    space = driver.config_space(wl, target)
    db.add_trials(wl, target, was_running.id, [(space.get(i), _result(i)) for i in (0, 1, 2)],
                  wl.flops())
    was_queued = db.create_job(workload=wl, target=target, tuner="random", trials=5,
                               options=opts)
    db.dispose()

    tune = FakeTune(batch=4)
    client = serve(tune)
    for job, budget in ((was_running, 10), (was_queued, 5)):
        final = _wait_state(client, job.id, "done")
        assert final["trials_done"] == budget
    assert [c["job_id"] for c in tune.calls] == [was_running.id, was_queued.id]
    trials, total = client.app.state.db.job_trials(was_running.id, limit=100)
    assert total == 10 and len({t.config_index for t in trials}) == 10


@pytest.mark.serial
def test_trial_pages_stay_fast_with_10000_trials(serve) -> None:
    client = serve()
    db = client.app.state.db
    wl, target = Workload.from_dict(SMALL_MATMUL), Target("llvm")
    job = db.create_job(workload=wl, target=target, tuner="random", trials=10_000, options={})
    db.set_job_state(job.id, "done")
    space = driver.config_space(wl, target)
    db.add_trials(wl, target, job.id, [(space.get(i), _result(i)) for i in range(10_000)],
                  wl.flops())
    for params in ({"sort": "-gflops"}, {"sort": "cost", "offset": 9_000},
                   {"error": "compile", "offset": 1_900}):
        client.get(f"/api/v1/jobs/{job.id}/trials", params=params)  # warm
        t0 = time.perf_counter()
        page = client.get(f"/api/v1/jobs/{job.id}/trials", params={**params, "limit": 100})
        assert page.status_code == 200 and page.json()["items"]
        assert time.perf_counter() - t0 < 0.5, params
    t0 = time.perf_counter()
    curve = client.get(f"/api/v1/jobs/{job.id}/curves", params={"points": 50}).json()
    assert time.perf_counter() - t0 < 0.5
    assert curve["items"][0]["points"][-1][0] == 10_000


def test_curves_report_the_rank_correlation_of_each_scored_batch(serve) -> None:
    client = serve()
    db = client.app.state.db
    wl, target = Workload.from_dict(SMALL_MATMUL), Target("llvm")
    job = db.create_job(workload=wl, target=target, tuner="xgb", trials=8, options={})
    db.set_job_state(job.id, "done")
    space = driver.config_space(wl, target)

    def scored(index: int, cost: float, score: float, batch: int) -> tuple[Any, MeasureResult]:
        return space.get(index), MeasureResult(costs=(cost,),
                                               extra={"predicted": score, "batch": batch})

    # Batch 0 ranked right (fastest scored highest), batch 4 backwards, on another scale.
    items = [scored(i, 1e-4 * (i + 1), 10.0 - i, 0) for i in range(4)]
    items += [scored(i, 1e-4 * (i - 3), 0.01 * i, 4) for i in range(4, 8)]
    db.add_trials(wl, target, job.id, items, wl.flops())
    page = client.get(f"/api/v1/jobs/{job.id}/curves").json()
    assert page["rank_correlation"] == [{"batch": 0, "pairs": 4, "rho": pytest.approx(1.0)},
                                        {"batch": 4, "pairs": 4, "rho": pytest.approx(-1.0)}]


def synthetic_tune(workload: Workload, target: Target, **kwargs: Any) -> Any:
    """The real `autotune.tune` (loop, tuner, lease-checked writes) over a synthetic
    objective instead of the service's executor."""
    from autotune.api import tune
    from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective

    objective = SyntheticObjective(driver.config_space(workload, target), seed=5, fail_rate=0.2)
    return tune(workload, target, **{**kwargs, "executor": SyntheticExecutor(objective)})


def test_curves_carry_the_current_models_scores_of_a_finished_xgb_job(serve) -> None:
    client = serve(synthetic_tune)
    headers = _key(client)
    fast = {"min_records": 8, "workers": 0, "n_estimators": 30, "n_chains": 16, "sa_steps": 6}
    job = _job(client, headers, tuner="xgb", trials=16, tuner_options=fast)
    plain = _job(client, headers, tuner="random", trials=8)
    for done in (job, plain):
        assert _wait_state(client, done["id"], "done", "failed")["state"] == "done"

    page = client.get(f"/api/v1/jobs/{job['id']}/curves").json()
    model = page["current_model"]
    assert model is not None and (model["batch"], model["trials"]) == (8, 16)
    trials = client.get(f"/api/v1/jobs/{job['id']}/trials", params={"limit": 100}).json()
    valid = [t["gflops"] for t in trials["items"] if t["gflops"] is not None]
    assert trials["total"] == 16 and 0 < len(valid) < 16  # some failed: no score, no point
    # one point per valid trial, in trial order, on one model's scale
    assert [g for _, g in model["points"]] == pytest.approx(valid)
    assert len({score for score, _ in model["points"]}) > 1
    assert model["rho"] is None or -1 <= model["rho"] <= 1
    assert client.get(f"/api/v1/jobs/{plain['id']}/curves").json()["current_model"] is None
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    assert schemas["CurvesPage"]["properties"]["current_model"]["anyOf"][0] == {
        "$ref": "#/components/schemas/CurrentModel"}
    assert set(schemas["CurrentModel"]["required"]) == {"batch", "trials", "points", "rho"}


def test_job_settings_round_trip_and_old_rows_read(serve, tmp_path) -> None:
    client = serve(FakeTune(batch=4))
    headers = _key(client)
    sent = {"tuner": "ga", "trials": 8, "transfer": False, "early_stopping": 3, "seed": 7,
            "tuner_options": {"pop_size": 4}, "measure_options": {"repeat": 3}}
    job = _job(client, headers, **sent)
    got = client.get(f"/api/v1/jobs/{job['id']}").json()
    assert {name: got[name] for name in sent} == sent and "options" not in got
    # Rows written before measure_options (service) or with batch_size (autotune.tune).
    db = client.app.state.db
    wl, target = Workload.from_dict(SMALL_MATMUL), Target("llvm")
    for options in ({"seed": 2, "early_stopping": None, "transfer": True, "tuner_options": {}},
                    {"seed": 2, "batch_size": 16, "early_stopping": None,
                     "tuner_options": {"transfer": True}}):
        old = db.create_job(workload=wl, target=target, tuner="random", trials=5,
                            options=options)
        db.set_job_state(old.id, "cancelled")
        got = client.get(f"/api/v1/jobs/{old.id}").json()
        assert got["seed"] == 2 and got["measure_options"] == {} and "batch_size" not in got


# ---- dtypes ----------------------------------------------------------------------------

def test_a_half_dtype_on_a_cpu_target_is_a_422_naming_dtype(serve) -> None:
    client = serve()
    for dtype in ("float16", "bfloat16"):
        response = client.post("/api/v1/jobs", json={"workload": {**_mm(), "dtype": dtype},
                                                     "target": "llvm"}, headers=_key(client))
        assert response.status_code == 422, response.text
        (detail,) = response.json()["detail"]
        assert detail["loc"] == ["body", "workload", "dtype"]
        assert f"dtype '{dtype}' is not supported on llvm (CPU) targets" in detail["msg"]
    assert client.get("/api/v1/jobs", headers=_key(client)).json()["total"] == 0


def test_a_half_dtype_on_cuda_is_refused_only_as_an_unmeasurable_target_is(serve) -> None:
    # on this host (no GPU) a cuda target is refused at the target, whatever the dtype
    import os

    if os.path.exists("/dev/nvidiactl"):
        pytest.skip("this host may have a CUDA GPU")
    client = serve()
    for dtype in ("float32", "float16"):
        response = client.post("/api/v1/jobs", json={"workload": {**_mm(), "dtype": dtype},
                                                     "target": "cuda -arch=sm_80"},
                               headers=_key(client))
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"] == ["body", "target"]


def test_a_half_cuda_job_is_accepted_where_jobs_measure_elsewhere(serve) -> None:
    # on a Ray cluster the workers measure: the service takes the job and shows its dtype
    client = serve(ray_address="127.0.0.1:1")
    headers = _key(client)
    response = client.post("/api/v1/jobs", json={
        "workload": {**_mm(), "dtype": "bfloat16"}, "target": "cuda -arch=sm_90",
        "trials": 4, "tuner": "random"}, headers=headers)
    assert response.status_code == 201, response.text
    job = response.json()
    assert job["workload"]["dtype"] == "bfloat16"
    assert job["label"] == "matmul(M=64,N=64,K=64):bfloat16"
    listed = client.get("/api/v1/jobs", headers=headers).json()["items"]
    assert [j["workload"]["dtype"] for j in listed] == ["bfloat16"]


def test_ops_list_the_dtypes_of_each_op(serve) -> None:
    client = serve()
    ops = {op["name"]: op for op in client.get("/api/v1/ops", headers=_key(client)).json()}
    assert ops["conv2d"]["dtypes"] == ["float32", "float16", "bfloat16"]
    assert ops["max_pool2d"]["dtypes"] == ["float32"]
    schema = client.get("/openapi.json").json()["components"]["schemas"]["WorkloadIn"]
    assert schema["properties"]["dtype"]["enum"] == ["float32", "float16", "bfloat16"]
    # the schema says which ops take a half dtype, as validation does
    import jsonschema

    valid = jsonschema.Draft202012Validator(schema).is_valid
    params = {"N": 1, "C": 4, "H": 8, "W": 8, "R": 3, "S": 3, "stride": 1, "pad": 1}
    assert valid({"op": "conv2d", "params": {**params, "K": 4}, "dtype": "bfloat16"})
    assert not valid({"op": "conv2d", "params": params, "dtype": "bfloat16"})  # no K
    assert valid({"op": "max_pool2d", "params": params})
    assert not valid({"op": "max_pool2d", "params": params, "dtype": "float16"})
    response = client.post("/api/v1/jobs", json={"workload": {
        "op": "max_pool2d", "params": params, "dtype": "float16"}, "target": "llvm"},
        headers=_key(client))
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "workload", "dtype"]


def test_max_pool2d_is_listed_and_its_schema_refuses_an_epilogue(serve) -> None:
    client = serve()
    ops = {op["name"]: op for op in client.get("/api/v1/ops", headers=_key(client)).json()}
    assert ops["max_pool2d"]["epilogue"] == [] and ops["max_pool2d"]["targets"] == ["llvm"]
    assert ops["max_pool2d"]["dtypes"] == ["float32"]
    import jsonschema

    schema = client.get("/openapi.json").json()["components"]["schemas"]["WorkloadIn"]
    assert "max_pool2d" in schema["properties"]["op"]["enum"]
    valid = jsonschema.Draft202012Validator(schema).is_valid
    assert valid(_pool()) and valid({**_mm(), "epilogue": ["relu"]})
    assert not valid({**_pool(), "epilogue": ["relu"]})
    assert not valid({**_pool(), "dtype": "float16"})
    response = client.post("/api/v1/jobs", json={"workload": _pool(), "trials": 4},
                           headers=_key(client))
    assert response.status_code == 201, response.text
    assert response.json()["label"] == "max_pool2d(N=1,C=8,H=16,W=16,R=3,S=3,stride=(2,2)," \
                                       "pad=(1,1))"


def test_max_pool2d_on_a_cuda_cluster_is_refused_at_op() -> None:
    """Where jobs are measured elsewhere (a Ray cluster), a cuda target passes: the op is
    what it refuses."""
    from fastapi.exceptions import RequestValidationError

    from autotune.service.schemas import JobCreate
    from autotune.service.validation import check_job

    body = {"workload": _pool(), "target": "cuda -arch=sm_80"}
    with pytest.raises(RequestValidationError) as err:
        check_job(JobCreate.model_validate(body), measured_here=False)
    (error,) = err.value.errors()
    assert error["loc"] == ("body", "workload", "op") and "llvm targets only" in error["msg"]


def test_best_answers_for_the_dtype_asked(serve) -> None:
    """float16 and float32 records of one shape are different workloads to GET /best."""
    client = serve()
    db, gpu = client.app.state.db, Target("cuda -arch=sm_90")
    half = Workload.from_dict({**_mm(), "dtype": "float16"})
    db.add_trials(half, gpu, None, [(driver.config_space(half, gpu).get(0), _result(0))],
                  half.flops())
    headers = _key(client)

    def best(dtype: str):
        return client.get("/api/v1/best", params={
            "workload": json.dumps({**_mm(), "dtype": dtype}), "target": gpu.key},
            headers=headers)

    found = best("float16")
    assert found.status_code == 200, found.text
    assert found.json()["workload"]["dtype"] == "float16"
    assert found.json()["cost"] == _result(0).cost
    assert best("float32").status_code == 404
