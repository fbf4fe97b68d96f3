"""autotune.tune / best / build with the real spaces and SQLite, measured synthetically."""
from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

import autotune
from autotune import api
from autotune.db import Database
from autotune.measure.executor import Executor
from autotune.measure.replay import ReplayExecutor
from autotune.search import DEFAULT_TUNER
from autotune.search.synthetic import SyntheticExecutor, SyntheticObjective

WL = {"op": "matmul", "params": {"M": 64, "N": 64, "K": 64}}


@pytest.fixture
def wl():
    return autotune.workload("matmul", M=64, N=64, K=64)


@pytest.fixture
def target():
    return autotune.Target("llvm")


@pytest.fixture
def space(wl, target):
    return autotune.config_space(wl, target)


@pytest.fixture
def objective(space):
    return SyntheticObjective(space, seed=1, fail_rate=0.05)


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'api.db'}"


def test_tune_records_a_job_and_its_trials(wl, target, objective, url):
    executor = SyntheticExecutor(objective)
    # default tuner
    result = autotune.tune(WL, "llvm", trials=40, db=url, executor=executor, seed=1)
    assert isinstance(result, autotune.TuneResult) and result.trials == 40 and result.ok
    assert not executor.closed  # the caller's executor stays open
    db = Database(url)
    job = db.get_job(result.job_id)
    assert job.state == "done" and job.tuner == DEFAULT_TUNER and job.trials_done == 40
    assert job.best_gflops == pytest.approx(result.best_gflops)
    assert db.job_trial_count(job.id) == 40
    found = autotune.best(wl, target, db=db)
    assert found.config == result.best_config and found.gflops == pytest.approx(result.best_gflops)
    db.dispose()


def test_two_tune_runs_never_measure_a_config_twice(objective, url):
    a, b = SyntheticExecutor(objective), SyntheticExecutor(objective)
    autotune.tune(WL, trials=32, db=url, executor=a, tuner="random", seed=0)
    autotune.tune(WL, trials=32, db=url, executor=b, tuner="random", seed=0)
    measured_a = set(a.submitted[:32])
    assert not measured_a & set(b.submitted[:32])
    db = Database(url)
    assert len(db.trials_for(json.dumps(WL), "x")) == 0  # keys are canonical, not raw JSON
    assert len(db.measured_indices(autotune.workload("matmul", M=64, N=64, K=64),
                                   autotune.Target("llvm"))) == 64
    db.dispose()


def test_a_failing_executor_fails_the_job(url):
    class Broken(Executor):
        def submit(self, inputs):
            raise RuntimeError("device lost")

        def close(self):
            pass

    with pytest.raises(RuntimeError, match="device lost"):
        autotune.tune(WL, trials=8, db=url, executor=Broken(), tuner="ga")
    db = Database(url)
    jobs, _ = db.list_jobs()
    assert jobs[0].state == "failed" and "device lost" in jobs[0].error
    db.dispose()


def test_tune_holds_its_job_under_a_lease_and_releases_it(objective, url):
    db = Database(url)
    seen = []

    def look(progress):
        seen.append(db.get_job(progress.job_id))

    result = autotune.tune(WL, trials=16, db=url, executor=SyntheticExecutor(objective),
                           tuner="random", batch_size=8, callbacks=[look])
    assert [j.state for j in seen] == ["running", "running"]
    assert seen[0].owner and seen[0].owner.split(":")[1] == str(os.getpid())
    assert seen[0].lease_expires_at > seen[0].started_at
    assert db.claim_job("elsewhere:1:aa", 30.0) is None  # nobody else takes it meanwhile
    job = db.get_job(result.job_id)
    assert job.state == "done" and job.owner is None and job.lease_expires_at is None
    db.dispose()


class SlowExecutor(SyntheticExecutor):
    def submit(self, inputs):
        time.sleep(0.1)
        return super().submit(inputs)


def test_tune_stops_when_its_job_is_cancelled_elsewhere(objective, url, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_JOB_LEASE_S", "1")  # renewed, and so checked, every 1/3 s
    elsewhere = Database(url)

    def cancel_from_a_service(progress):
        if progress.trials_done == 4:
            elsewhere.set_job_state(progress.job_id, "cancelled", from_states=["running"])

    result = autotune.tune(WL, trials=400, db=url, executor=SlowExecutor(objective),
                           tuner="random", batch_size=4, callbacks=[cancel_from_a_service])
    assert result.stopped == "callback" and result.trials < 100
    job = elsewhere.get_job(result.job_id)
    assert job.state == "cancelled" and job.owner is None
    elsewhere.dispose()


def test_tune_with_a_replay_executor_searches_its_pool(wl, target, objective, tmp_path, url):
    source = f"sqlite:///{tmp_path / 'recorded.db'}"
    autotune.tune(WL, trials=48, db=source, executor=SyntheticExecutor(objective), seed=3,
                  tuner="ga")
    with api.open_database(source) as db:
        replay = ReplayExecutor.from_db(db, wl, target)
    result = autotune.tune(WL, trials=100, db=url, executor=replay, tuner="grid")
    assert result.trials == 48 and result.stopped == "exhausted"
    assert "instantiation" not in result.errors
    assert result.best_cost == pytest.approx(autotune.best(wl, target, db=source).cost)


def test_tune_validates_tuner_and_workload(url, objective):
    with pytest.raises(ValueError, match="unknown tuner"):
        autotune.tune(WL, trials=4, db=url, tuner="nope", executor=SyntheticExecutor(objective))
    with pytest.raises(ValueError, match="unknown op"):
        autotune.tune({"op": "matmull", "params": {}}, trials=4, db=None)
    with pytest.raises(ValueError, match="target"):
        autotune.tune(WL, "tpu", trials=4, db=None)


def test_tune_without_a_database(objective):
    result = autotune.tune(WL, trials=16, db=None, executor=SyntheticExecutor(objective),
                           tuner="ga")
    assert result.trials == 16 and result.job_id is None


def test_best_is_none_without_records_and_does_not_create_the_file(tmp_path, wl):
    path = tmp_path / "absent.db"
    assert autotune.best(wl, "llvm", db=f"sqlite:///{path}") is None
    assert not path.exists()


def test_export_import_gives_the_same_best(wl, target, objective, url, tmp_path):
    autotune.tune(WL, trials=32, db=url, executor=SyntheticExecutor(objective), tuner="ga")
    path = tmp_path / "records.jsonl.gz"
    with api.open_database(url) as db:
        assert db.export_jsonl_path(path) == 32
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    with api.open_database(fresh) as db:
        assert db.import_jsonl_path(path) == 32
    a, b = autotune.best(wl, target, db=url), autotune.best(wl, target, db=fresh)
    assert a.config == b.config and a.cost == b.cost and a.gflops == b.gflops


class _Service(BaseHTTPRequestHandler):
    body: dict | None = None
    status = 200
    seen: list = []

    def do_GET(self):
        query = parse_qs(urlparse(self.path).query)
        type(self).seen.append((urlparse(self.path).path, query))
        payload = json.dumps(self.body if self.status == 200 else {"detail": "nope"}).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def service():
    server = HTTPServer(("127.0.0.1", 0), _Service)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Service.seen = []
    yield server, f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_best_from_the_rest_service(service, wl, target, space):
    server, base = service
    cfg = space.get(1234)
    _Service.status, _Service.body = 200, {"config": cfg.to_dict(), "cost": 2e-4,
                                           "gflops": wl.flops() / 2e-4 / 1e9, "error": "none"}
    found = autotune.best(wl, target, url=base)
    assert found.config == cfg and found.cost == 2e-4
    path, query = _Service.seen[-1]
    assert path == "/api/v1/best" and json.loads(query["workload"][0]) == wl.to_dict()
    assert query["target"] == [target.key]
    _Service.status = 404
    assert autotune.best(wl, target, url=base + "/") is None
    _Service.status = 500
    with pytest.raises(api.ServiceError, match="answered 500"):
        autotune.best(wl, target, url=base)


def test_best_from_an_unreachable_service(wl):
    with pytest.raises(api.ServiceError, match="cannot reach"):
        autotune.best(wl, url="http://127.0.0.1:9", timeout=2)


class _FakeKernel:
    def __init__(self, config):
        self.config = config


@pytest.fixture
def fake_compile(monkeypatch):
    compiled = []

    def compile_(workload, target, config=None):
        compiled.append(config.index)
        return _FakeKernel(config)

    monkeypatch.setattr("autotune.driver.compile", compile_)
    api.clear_build_cache()
    yield compiled
    api.clear_build_cache()


def test_build_compiles_the_best_once(fake_compile, wl, objective, url):
    result = autotune.tune(WL, trials=24, db=url, executor=SyntheticExecutor(objective),
                           tuner="ga")
    k1 = autotune.build(wl, db=url)
    k2 = autotune.build(json.dumps(WL), "llvm", db=url)
    assert k1 is k2 and k1.config == result.best_config
    assert fake_compile == [result.best_config.index]
    info = api.build_cache_info()
    assert (info.hits, info.misses, info.size) == (1, 1, 1)


def test_build_without_records_warns_and_uses_the_default(fake_compile, wl, space, tmp_path):
    with pytest.warns(api.NoTunedScheduleWarning, match=r"matmul\(M=64,N=64,K=64\)"):
        kernel = autotune.build(wl, db=f"sqlite:///{tmp_path / 'empty.db'}")
    assert kernel.config == space.default()


def test_transfer_reaches_only_tuners_that_take_it(monkeypatch, objective):
    from autotune.search import Option, registry
    from autotune.search.random_tuner import RandomTuner

    made = []

    class Transferring(RandomTuner):
        name = "transferring"
        OPTIONS = (Option("transfer", "use history", True),)

        def __init__(self, space, **kwargs):
            super().__init__(space, **kwargs)
            made.append(self)

    real = registry.tuner_class
    monkeypatch.setattr(registry, "tuner_class",
                        lambda name: Transferring if name == "transferring" else real(name))
    autotune.tune(WL, trials=4, db=None, tuner="transferring", transfer=False,
                  executor=SyntheticExecutor(objective))
    assert made[0].options["transfer"] is False and made[0].task.workload.op == "matmul"
    autotune.tune(WL, trials=4, db=None, tuner="random", transfer=False,  # no such option
                  executor=SyntheticExecutor(objective))


def test_settings_db_url_decides_where_tune_writes(tmp_path, monkeypatch):
    # Read at call time: set after import, it still counts (a real, tiny measurement).
    path = tmp_path / "from-env.db"
    monkeypatch.setenv("AUTOTUNE_DB_URL", f"sqlite:///{path}")
    monkeypatch.setenv("AUTOTUNE_REPEAT", "1")
    monkeypatch.setenv("AUTOTUNE_MIN_REPEAT_MS", "0")
    monkeypatch.chdir(tmp_path)
    small = {"op": "matmul", "params": {"M": 8, "N": 8, "K": 8}}
    result = autotune.tune(small, trials=2, tuner="random")
    assert path.exists() and not (tmp_path / "autotune.db").exists()
    db = Database(f"sqlite:///{path}")
    try:
        job = db.get_job(result.job_id)
        assert job.trials_done == result.trials
        assert job.options["measure_options"]["repeat"] == 1  # the settings' measure options
    finally:
        db.dispose()
    assert autotune.best(small) is not None  # best reads the same database


def test_library_and_loop_default_to_the_same_tuner(monkeypatch, wl, target, space,
                                                     objective):
    from autotune.search import registry
    from autotune.search.loop import tune_loop

    made, real = [], registry.tuner_class
    monkeypatch.setattr(registry, "tuner_class", lambda name: made.append(name) or real(name))
    autotune.tune(wl, target, trials=2, db=None, executor=SyntheticExecutor(objective))
    by_library, made[:] = set(made), []
    tune_loop(wl, target, space, SyntheticExecutor(objective), trials=2, retime=0)
    assert by_library == set(made) == {DEFAULT_TUNER} and DEFAULT_TUNER == "xgb"


# ---- dtypes: refused before anything is built or recorded ------------------------------

HALF = {**WL, "dtype": "float16"}


@pytest.mark.parametrize("call", ["tune", "build", "config_space", "lower", "compile", "source"])
def test_a_half_dtype_on_a_cpu_target_is_refused_naming_dtype(call, url, tmp_path):
    from autotune import driver
    from autotune.ops import WorkloadError

    wl = autotune.Workload.from_dict(HALF)
    calls = {
        "tune": lambda: autotune.tune(HALF, "llvm", db=url, trials=4, progress=False),
        "build": lambda: autotune.build(wl, "llvm", db=url),
        "config_space": lambda: autotune.config_space(wl, autotune.Target("llvm")),
        "lower": lambda: autotune.lower(wl, "llvm"),
        "compile": lambda: autotune.compile(wl, "llvm"),
        "source": lambda: driver.source(wl, autotune.Target("llvm")),
    }
    with pytest.raises(WorkloadError, match="dtype 'float16' is not supported on llvm") as err:
        calls[call]()
    assert err.value.field == "dtype"
    assert not (tmp_path / "api.db").exists()  # no job, not even a database


def test_tune_tasks_refuses_a_half_task_on_a_cpu_before_a_run(url, tmp_path):
    from autotune.frontend.tasks import ModelTasks, Task
    from autotune.frontend.tuning import tune_tasks
    from autotune.ops import WorkloadError

    half = autotune.Workload.from_dict({"op": "conv2d", "dtype": "bfloat16", "params": dict(
        N=1, C=8, H=8, W=8, K=8, R=3, S=3, stride=1, pad=1)})
    model = ModelTasks("m", (Task(half, 1, ("conv",)),), ())
    with pytest.raises(WorkloadError, match="bfloat16") as err:
        tune_tasks(model, trials=4, target="llvm", db=url)
    assert err.value.loc == ("dtype",) and not (tmp_path / "api.db").exists()


def test_compile_model_refuses_a_half_kernel_on_a_cpu_before_any_lookup(url, tmp_path):
    # torch models extract float32 kernels today; a half one is refused like the rest
    pytest.importorskip("torch")
    from autotune.frontend.runtime import _configs
    from autotune.frontend.torch import Match
    from autotune.ops import WorkloadError

    half = autotune.Workload.from_dict({**WL, "dtype": "float16"})
    match = Match(half, ("mm",), ("x", "y"), (), "matmul", "mm")
    with pytest.raises(WorkloadError, match="float16") as err:
        _configs([match], autotune.Target("llvm"), url)
    assert err.value.field == "dtype" and not (tmp_path / "api.db").exists()
