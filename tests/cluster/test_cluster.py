"""Measurement on a real multi-node Ray cluster on this machine: a head node and `autotune
worker` processes that each join as a node of their own (synthetic devices where the test is
about the cluster, the real CPU where it is about kernels)."""
from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import pytest

from autotune import config_space
from autotune.api import tune
from autotune.cluster.executor import RayExecutor
from autotune.db import Database
from autotune.measure.result import ErrorKind, MeasureInput
from autotune.ops import workload
from autotune.target import Target

pytestmark = pytest.mark.timeout(300)

WL = workload("matmul", M=64, N=64, K=64)


def synthetic(cores: int) -> tuple[Target, list[str]]:
    """A target no real worker advertises, and the worker arguments of synthetic devices
    advertising it (``cores`` keeps each test's workers apart)."""
    spec = f"llvm -mcpu=x86-64-v3 -cores={cores}"
    return Target(spec), ["--target", spec]


def test_two_workers_record_every_trial_once_in_order(workers: Any, tmp_path: Any) -> None:
    target, args = synthetic(101)
    procs = workers("--synthetic", "0.02", *args, count=2)
    db = Database.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    proposed: list[int] = []
    with RayExecutor(target) as executor:
        assert executor.registry.wait_live(target.key, 2) == 2
        assert executor.preferred_batch() == 4
        result = tune(WL, target, trials=40, tuner="random", db=db, executor=executor,
                      batch_size=2, callbacks=[lambda p: proposed.extend(
                          c.index for c, _ in p.last_batch)])
    records = db.trials_for(WL, target)
    assert result.trials == 40 and len(proposed) == 40
    # every trial once, in the order the tuner proposed them; batches were at least 2W = 4
    assert [r.config_index for r in records] == proposed
    assert all(r.error == "none" for r in records)
    by = {r.extra["measured_by"]["worker"] for r in records}
    assert by == {i for p in procs for i in p.ids()}  # both workers measured
    assert {r.worker for r in records} == by  # and the database column says so
    db.dispose()


def test_killed_worker_node_loses_and_doubles_nothing(workers: Any, tmp_path: Any) -> None:
    target, args = synthetic(102)
    slow, fast = workers("--synthetic", "0.25", *args, count=2)
    db = Database.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    seen: list[int] = []

    def kill_after_first_batch(progress: Any) -> None:
        seen.append(progress.trials_done)
        if len(seen) == 1:
            threading.Timer(0.3, slow.kill_node).start()  # mid-way through the next batch

    with RayExecutor(target) as executor:
        assert executor.registry.wait_live(target.key, 2) == 2
        result = tune(WL, target, trials=24, tuner="random", db=db, executor=executor,
                      batch_size=8, callbacks=[kill_after_first_batch])
        assert result.trials == 24
        records = db.trials_for(WL, target)
        assert len(records) == len({r.config_index for r in records}) == 24
        # a lost worker is not the configs' failure
        assert all(r.error == "none" for r in records), [r.error_msg for r in records]
        lost = slow.ids()[0]
        assert any(w["worker"] == lost and w["state"] == "dead"
                   for w in executor.registry.snapshot())
        assert fast.ids()[0] in {r.worker for r in records}
    db.dispose()


def test_candidate_that_kills_its_worker_is_retried_once_then_recorded(workers: Any) -> None:
    target, args = synthetic(103)
    space = config_space(WL, target)
    deadly = space.get(len(space) - 1)
    workers("--synthetic", "0.01", "--crash", str(deadly.index), *args, count=2)
    configs = [space.get(i) for i in range(5)] + [deadly] + [space.get(i) for i in range(5, 8)]
    with RayExecutor(target) as executor:
        assert executor.registry.wait_live(target.key, 2) == 2
        results = executor.submit([MeasureInput(WL, target, c) for c in configs])
    bad = results[5]
    assert bad.error is ErrorKind.RUNTIME
    assert "took down two measurement workers" in bad.error_msg
    assert all(r.ok for i, r in enumerate(results) if i != 5)


def test_job_waits_without_a_worker_and_runs_when_one_joins(workers: Any) -> None:
    target, args = synthetic(104)
    space = config_space(WL, target)
    heard: list[Any] = []
    out: list[Any] = []
    with RayExecutor(target) as executor:
        inputs = [MeasureInput(WL, target, space.get(i)) for i in range(4)]
        thread = threading.Thread(target=lambda: out.append(
            executor.submit(inputs, on_wait=heard.append)))
        thread.start()
        deadline = time.monotonic() + 10
        while not heard and time.monotonic() < deadline:
            time.sleep(0.1)
        assert heard and "no live measurement worker" in heard[0] and target.key in heard[0]
        assert thread.is_alive() and not out
        workers("--synthetic", "0.01", *args)
        thread.join(60)
        assert out and all(r.ok for r in out[0])
        assert heard[-1] is None  # told that it goes on


def test_real_cpu_kernels_measured_through_a_ray_worker_pass_the_numpy_check(
        workers: Any) -> None:
    (proc,) = workers("--no-gpus", AUTOTUNE_REPEAT=2, AUTOTUNE_MIN_REPEAT_MS=2)
    target = Target("llvm")
    space = config_space(WL, target)
    configs = [space.default()] + space.sample(np.random.default_rng(0), 5)
    with RayExecutor(target) as executor:
        executor.registry.refresh()
        results = executor.submit([MeasureInput(WL, target, c) for c in configs])
    ok = [r for r in results if r.ok]
    assert results[0].ok and len(ok) >= 3, [r.error_msg for r in results]
    # every valid result passed the runner's comparison with numpy on the worker
    for r in ok:
        assert r.extra["measured_by"]["worker"] == proc.ids()[0]
        assert r.extra["measured_by"]["device"]
    assert all(r.error in (ErrorKind.NONE, ErrorKind.INSTANTIATION) for r in results)


def test_cli_tune_measures_on_the_cluster(workers: Any, head: Any, tmp_path: Any) -> None:
    import subprocess
    import sys

    target, args = synthetic(106)
    (proc,) = workers("--synthetic", "0.01", *args)
    db = f"sqlite:///{tmp_path / 'db.sqlite'}"
    out = subprocess.run([sys.executable, "-m", "autotune.cli", "tune", "matmul", "-p", "M=64",
                          "-p", "N=64", "-p", "K=64", "--target", args[1], "--trials", "12",
                          "--tuner", "random", "--db", db, "--ray-address", head.address],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Ray cluster" in out.stderr and "12 trials measured" in out.stdout
    database = Database(db)
    records = database.trials_for(WL, target)
    assert len(records) == 12
    assert {r.extra["measured_by"]["worker"] for r in records} == set(proc.ids())
    database.dispose()
