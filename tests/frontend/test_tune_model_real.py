"""`tune_model` with a tiny budget on this CPU (real builds and timings), then
`compile_model` on the records it left. Measurement workers are spawned: the test module
is importable by them, nothing runs at import."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import autotune  # noqa: E402
from autotune.api import NoTunedScheduleWarning  # noqa: E402
from autotune.db import Database  # noqa: E402
from autotune.measure import MeasureOptions  # noqa: E402
from tests.frontend.frontend_nets import randomize_bn  # noqa: E402

FAST = MeasureOptions(repeat=3, min_repeat_ms=5)


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 8 * 8, 16)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


@pytest.mark.slow
def test_tune_model_then_compile_model(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'model.db'}"
    model, x = randomize_bn(Small()), torch.randn(1, 4, 8, 8)
    result = autotune.tune_model(model, (x,), trials=8, db=url, measure_options=FAST)
    assert result.trials == result.trials_done == 8 and not result.failed
    assert [t.trials for t in result.tasks] == [4, 4]  # the budget split by the warm-up
    assert result.estimated_latency_s is not None and result.estimated_latency_s > 0
    db = Database(url)
    run = db.get_run(result.run_id)
    assert run.state == "done" and run.name == "Small" and len(run.tasks) == 2
    # the conv and the linear layer have constant weights: their prepacked forms are tuned
    assert {t["workload"]["op"]: t["workload"].get("prepacked") for t in run.tasks} == {
        "conv2d": True, "matmul": True}
    assert all(j.state == "done" for j in db.run_jobs(result.run_id))
    db.dispose()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoTunedScheduleWarning)  # every kernel has a record
        compiled = autotune.compile_model(model, (x,), db=url)
    with torch.no_grad():
        want = model(x)
        assert torch.allclose(compiled(x), want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


class Blockable(nn.Module):
    """Two residual blocks of two 16-channel convs: blocked on a CPU of 8 or 16 lanes, the
    first conv reading the NCHW input as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(16, 16, 3, padding=1, bias=False)
                                   for _ in range(4))

    def forward(self, x):
        for a, b in (self.convs[:2], self.convs[2:]):
            x = torch.relu(b(torch.relu(a(x))) + x)
        return x


@pytest.mark.slow
def test_tune_model_tunes_the_blocked_layouts_compile_model_runs(tmp_path: Path):
    lanes = autotune.Target("llvm").vector_lanes
    if 16 % lanes:
        pytest.skip("16 channels are not a multiple of the vector lanes")
    url = f"sqlite:///{tmp_path / 'model.db'}"
    model, x = Blockable().eval(), torch.randn(1, 16, 8, 8)
    result = autotune.tune_model(model, (x,), trials=4, db=url, measure_options=FAST,
                                 layout="auto")
    assert result.trials_done == 4 and not result.failed
    db = Database(url)
    run = db.get_run(result.run_id)
    assert {t["workload"].get("layout") for t in run.tasks} == {f"NCHW>NCHW{lanes}c",
                                                                f"NCHW{lanes}c"}
    db.dispose()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoTunedScheduleWarning)  # every kernel has a record
        compiled = autotune.compile_model(model, (x,), db=url, layout="auto")
    from autotune.frontend.layouts import transforms

    # the input blocked for the first residual add, the output back to NCHW
    assert len(transforms(compiled)) == 2
    with torch.no_grad():
        want = model(x)
        assert torch.allclose(compiled(x), want, rtol=1e-4, atol=1e-4 * want.abs().max().item())


class Pooled(nn.Module):
    """A conv, then ResNet's stem max-pool (3x3, stride 2, pad 1)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(3, 2, 1)

    def forward(self, x):
        return self.pool(torch.relu(self.conv(x)))


@pytest.mark.slow
def test_tune_model_tunes_the_max_pool_with_xgb(tmp_path: Path):
    """The pool is a task like the conv: tuned by the default (xgb) tuner, whose cost model
    reads the pool kernel's features, then run by compile_model from its records."""
    url = f"sqlite:///{tmp_path / 'model.db'}"
    model, x = Pooled().eval(), torch.randn(1, 4, 15, 15)
    result = autotune.tune_model(model, (x,), trials=12, db=url, measure_options=FAST,
                                 tuner="xgb")
    assert result.trials_done == 12 and not result.failed
    ops = {t.name.split("(")[0]: t.trials for t in result.tasks}
    assert set(ops) == {"conv2d", "max_pool2d"} and ops["max_pool2d"] >= 4
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoTunedScheduleWarning)  # every kernel has a record
        compiled = autotune.compile_model(model, (x,), db=url)
    with torch.no_grad():
        assert torch.allclose(compiled(x), model(x), rtol=1e-5, atol=1e-5)
