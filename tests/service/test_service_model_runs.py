"""GET /model-runs and /model-runs/{id} on a real server, and the dashboard pages."""
from __future__ import annotations

from pathlib import Path

from autotune.db import Database
from autotune.driver import config_space
from autotune.frontend import ModelTasks, Task, tune_tasks
from autotune.measure.executor import Executor
from autotune.ops import workload
from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective
from autotune.target import Target
from tests.service.service_helpers import create_key

TARGET = Target("llvm -mcpu=skylake -cores=2")
BIG = workload("matmul", M=128, N=128, K=128, epilogue=["bias"])
SMALL = workload("matmul", M=16, N=16, K=16)


class Synthetic(Executor):
    def __init__(self) -> None:
        self.by = {wl.key: SyntheticExecutor(SyntheticObjective(config_space(wl, TARGET),
                                                                base=base))
                   for wl, base in ((BIG, 1e-3), (SMALL, 1e-5))}

    def submit(self, inputs):
        return self.by[inputs[0].workload.key].submit(inputs)

    def close(self) -> None:
        pass


def tuned_run(url: str) -> int:
    model = ModelTasks("Net", (Task(BIG, 2, ("fc1", "fc2")), Task(SMALL, 1, ("head",))), ())
    return tune_tasks(model, trials=32, target=TARGET, db=url, tuner="random",
                      executor=Synthetic()).run_id  # type: ignore[return-value]


def test_model_run_routes(make_server, tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    run_id = tuned_run(url)
    server = make_server(url).start()
    with server.client() as c:
        page = c.get("/api/v1/model-runs").json()
        assert page["total"] == 1 and page["items"][0]["id"] == run_id
        item = page["items"][0]
        assert (item["name"], item["state"], item["budget"], item["trials_done"],
                item["tasks"]) == ("Net", "done", 32, 32, 2)
        run = c.get(f"/api/v1/model-runs/{run_id}").json()
        tasks = {t["label"]: t for t in run["task_list"]}
        assert tasks[str(BIG)]["weight"] == 2 and tasks[str(BIG)]["nodes"] == ["fc1", "fc2"]
        assert sum(t["trials"] for t in run["task_list"]) == 32
        assert abs(sum(t["share"] for t in run["task_list"]) - 1) < 1e-6
        assert run["history"][-1]["trials_done"] == 32
        assert run["history"][-1]["estimated_latency_s"] == run["estimated_latency_s"]
        assert {j["id"] for j in run["jobs"]} == {j for t in run["task_list"] for j in t["jobs"]}
        assert all(j["state"] == "done" for j in run["jobs"])
        # ids, offsets and limits are bounded
        assert c.get("/api/v1/model-runs/999").status_code == 404
        for bad in ("/api/v1/model-runs/0", f"/api/v1/model-runs/{2**63}",
                    "/api/v1/model-runs?limit=0", "/api/v1/model-runs?limit=501",
                    "/api/v1/model-runs?offset=-1", "/api/v1/model-runs/abc"):
            assert c.get(bad).status_code == 422, bad
        assert c.get("/api/v1/model-runs?offset=1").json()["items"] == []
        for path in ("/model-runs", f"/model-runs/{run_id}"):
            html = c.get(path)
            assert html.status_code == 200 and "model_run" in html.text
        assert 'href="/model-runs"' in c.get("/").text


def test_model_runs_need_a_key_when_reads_do(make_server, tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    Database.open(url).dispose()
    key = create_key(url)
    server = make_server(url, AUTOTUNE_REQUIRE_KEY_FOR_READS="1").start()
    with server.client() as c:
        assert c.get("/api/v1/model-runs").status_code == 401
    with server.client(key) as c:
        assert c.get("/api/v1/model-runs").json()["total"] == 0
