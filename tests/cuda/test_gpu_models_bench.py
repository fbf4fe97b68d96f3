"""benchmarks/gpu_models.py without a GPU: it says why and exits 2; its models (torchvision's
ResNet-18, ResNet-50 and MobileNet-V2) extract whole on a CUDA target in every dtype it times,
so each column runs every conv, depthwise conv and linear layer on autotune's kernels."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import autotune  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.gpu_models import build  # noqa: E402

LAYERS = {"resnet18": 21, "resnet50": 54, "mobilenetv2": 53}  # convs and the classifier


def test_without_a_gpu_it_says_why():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    out = subprocess.run([sys.executable, "benchmarks/gpu_models.py", "--quick"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "torch finds no CUDA GPU" in out.stderr


@pytest.mark.parametrize("name", list(LAYERS))
def test_every_layer_of_the_models_runs_on_autotune(name):
    for dtype in ("float32", "float16"):
        model, x = build(name, 1, dtype, device="cpu", size=64)  # small: shapes are traced
        tasks = autotune.extract(model, x, target="cuda -arch=sm_90")
        assert not tasks.unsupported, tasks.unsupported
        assert sum(t.weight for t in tasks.tasks) == LAYERS[name]
        assert {t.workload.dtype for t in tasks.tasks} == {dtype}


def _sleep(seconds: float, pid_file: str = "") -> None:
    """A column's process: a group of its own, with a child (a compile worker) in it."""
    import os
    import time
    os.setsid()
    if pid_file:
        child = subprocess.Popen(["sleep", str(seconds)])
        Path(pid_file).write_text(str(child.pid))
    time.sleep(seconds)


def test_a_column_not_ready_in_time_is_killed_with_its_group_and_a_dead_one_named(tmp_path):
    import multiprocessing as mp
    import os
    import time

    from benchmarks.gpu_models import _end, _not_ready

    ctx = mp.get_context("spawn")
    parent, _child = ctx.Pipe()
    pid_file = tmp_path / "worker.pid"
    slow = ctx.Process(target=_sleep, args=(60, str(pid_file)))
    slow.start()
    t0 = time.monotonic()
    assert _not_ready(slow, parent, time.monotonic() + 3) == "late"
    assert 3 <= time.monotonic() - t0 < 10
    worker = int(pid_file.read_text())
    _end(slow)
    assert not slow.is_alive() and slow.exitcode == -9
    for _ in range(100):  # the group's other process is killed too (reaped by init)
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the column's child {worker} outlived it")
    dead = ctx.Process(target=_sleep, args=(0,))
    dead.start()
    assert _not_ready(dead, parent, time.monotonic() + 30) == \
        "died while preparing (exit code 0)"
    _end(dead)  # already gone: nothing to kill


def test_prepare_timeout_must_be_positive():
    out = subprocess.run([sys.executable, "benchmarks/gpu_models.py", "--prepare-timeout", "0"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--prepare-timeout: 0 s; expected a positive" in out.stderr


@pytest.mark.parametrize("argv, message", [
    (["--models", "mobilenet_v2"], "--models: unknown ['mobilenet_v2']"),
    (["--dtypes", "float64"], "--dtypes: unknown ['float64']"),
    (["--batch", "1,x"], "--batch: '1,x' is not a list of whole numbers"),
    (["--batch", "0"], "--batch: [0]; expected sizes from 1 to 256"),
    (["--trials", "-1"], "--trials: [-1]; expected budgets from 0 to 100000"),
    (["--rounds", "0"], "--rounds 0: expected"),
])
def test_bad_arguments_are_named_before_any_work(argv, message):
    out = subprocess.run([sys.executable, "benchmarks/gpu_models.py", *argv], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and message in out.stderr, out.stderr


def test_an_interrupted_run_keeps_its_finished_rows(monkeypatch, capsys):
    import argparse

    import benchmarks.gpu_models as bench

    done = []

    def run_one(name, dtype, batch, args, target):
        if len(done) == 2:  # a timeout's SIGINT in the third row
            raise KeyboardInterrupt
        done.append(bench.Result(name, dtype, batch, {"eager": [1e-3]}, []))
        return done[-1]

    monkeypatch.setattr(bench, "run_one", run_one)
    args = argparse.Namespace(dtypes=["float16"], models=["resnet18", "resnet50", "mobilenetv2"],
                              batch=[1], torch_layout="auto")
    results: list = []
    assert bench.run_all(args, None, results) == 130
    assert results == done and [r.model for r in results] == ["resnet18", "resnet50"]
    assert "the summary holds the 2 finished rows" in capsys.readouterr().err
