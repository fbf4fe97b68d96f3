"""One best (issue 29): a job whose final re-timing ran in a slow moment shows the same best
in its summary, its chart's data, its top configs, `GET /best`, `autotune.best` (from the
database and through the service), the CLI and `autotune.build`."""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import autotune
from autotune import cli
from autotune.api import chosen_config
from autotune.search import retime
from autotune.search.synthetic import SyntheticObjective
from tests.search.search_cases import SlowRetiming

TRIALS = 24
TASK = ["matmul", "-p", "M=64", "-p", "N=64", "-p", "K=64"]


def test_a_job_re_timed_in_a_slow_moment_has_one_best(make_server: Any, tmp_path: Any,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(retime, "RETIME_PAUSE_S", 0.01)  # the fake's slowness is per batch
    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    wl, target = autotune.workload("matmul", M=64, N=64, K=64), autotune.Target("llvm")
    objective = SyntheticObjective(autotune.config_space(wl, target), seed=3)
    # The re-timing's first attempt runs 2x slow (noise): measured again, never pooled.
    executor = SlowRetiming(objective, after=TRIALS, slow=1)
    result = autotune.tune(wl, target, trials=TRIALS, tuner="random", db=url,
                           executor=executor, transfer=False)
    assert {(r.status, r.attempts) for r in result.retimed} == {("ok", 2)}
    expected = wl.flops() / objective.cost(result.best_config) / 1e9  # the quiet figure

    server = make_server(url).start()
    with server.client() as c:
        job = c.get(f"/api/v1/jobs/{result.job_id}").json()
        best = c.get("/api/v1/best", params={"workload": wl.to_json(),
                                             "target": target.key}).json()
        curve = c.get(f"/api/v1/jobs/{result.job_id}/curves").json()["items"][0]
        top = c.get(f"/api/v1/jobs/{result.job_id}/top", params={"k": 3}).json()["items"]
    assert job["state"] == "done"
    index = result.best_config.index
    assert best["config"]["index"] == top[0]["config"]["index"] == index
    for figure in (job["best_gflops"], best["retimed_gflops"], curve["best_gflops"],
                   top[0]["retimed_gflops"], result.best_gflops):
        assert figure == pytest.approx(expected)
    assert best["retimed_cost"] == pytest.approx(objective.cost(result.best_config))
    # The records keep their first measurements apart: the curve plots those.
    assert best["cost"] == pytest.approx(objective.cost(result.best_config))
    assert curve["points"][-1][1] >= max(t["gflops"] or 0 for t in top)

    for found in (autotune.best(wl, target, db=url), autotune.best(wl, target, url=server.url)):
        assert found is not None and found.config.index == index
        assert found.gflops == pytest.approx(expected)
    assert cli.main(["best", *TASK, "--db", url, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["config"]["index"] == index and printed["gflops"] == pytest.approx(expected)

    # build compiles that config, and it computes the operator
    assert chosen_config(wl, target, db=url).index == index
    kernel = autotune.build(wl, target, db=url)
    args = wl.random_args(0)
    kernel(*args)
    np.testing.assert_allclose(args[-1], wl.reference(args), rtol=1e-4, atol=1e-4)
