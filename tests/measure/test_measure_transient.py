"""Transient failures: a runner killed from outside (OOM killer, an operator's SIGKILL) is
not the config's verdict. The candidate is measured again at once; lost twice, it is
recorded as ``transient``, which a later measurement replaces and ``best()`` and the tuners
ignore."""
from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest

import autotune
from autotune.db import Database
from autotune.measure import LocalBuilder, LocalExecutor, LocalRunner, MeasureOptions
from autotune.measure.executor import Executor
from autotune.measure.result import ErrorKind, MeasureInput, MeasureResult
from autotune.search.loop import tune_loop
from autotune.target import Target

pytestmark = pytest.mark.timeout(240)

DIE_DIR = "AUTOTUNE_TEST_DIE_DIR"  # where `load_or_die` counts the deaths it still owes


def load_or_die(artifact: Any, target: Any) -> Any:
    """`driver.load`, after SIGKILLing this runner once per file ``die-*`` left in DIE_DIR
    (as the OOM killer would: the kernel itself is fine)."""
    folder = Path(os.environ[DIE_DIR])
    for owed in sorted(folder.glob("die-*")):
        owed.unlink()
        os.kill(os.getpid(), signal.SIGKILL)
    from autotune.driver import load

    return load(artifact, target)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _kill_when_busy(executor: LocalExecutor, killed: list[int]) -> None:
    """SIGKILL the (warm) runner once it has spent a quarter second of CPU timing kernels."""
    pid = executor.runner.pid
    assert pid is not None
    start = _cpu_seconds(pid)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if _cpu_seconds(pid) - start >= 0.25:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.01)


@pytest.mark.serial  # a kill timed by the runner's CPU seconds
def test_runner_sigkilled_mid_batch_measures_the_config_again() -> None:
    target = Target("llvm")
    wl = autotune.workload("matmul", M=64, N=64, K=64)
    sp = autotune.config_space(wl, target)
    # Each config is timed for at least half a second: the kill lands while one is timed.
    opts = MeasureOptions(repeat=5, min_repeat_ms=100.0, n_build_workers=1, run_timeout=20.0)
    with LocalExecutor(target, opts) as executor:
        executor.warm_up()
        killed: list[int] = []
        killer = threading.Thread(target=_kill_when_busy, args=(executor, killed))
        killer.start()
        # the default on one thread, and its first valid neighbour: serial kernels, which a
        # busy host slows far less than a parallel one (a random config may time out)
        first = sp.config({**sp.default().to_dict()["knobs"], "parallel": 1})
        second = next(c for c in sp.neighbors(first) if sp.is_valid(c) and c["parallel"] == 1)
        inputs = [MeasureInput(wl, target, first), MeasureInput(wl, target, second)]
        results = executor.submit(inputs)
        killer.join()
        assert killed, "the runner was never busy"
        assert executor.runner.pid != killed[0]
    assert [r.error for r in results] == [ErrorKind.NONE, ErrorKind.NONE], results
    retried = [r for r in results if "retried" in r.extra]
    assert len(retried) == 1 and "signal 9" in retried[0].extra["retried"]
    assert all(r.cost > 0 for r in results)


def _executor(target: Target) -> LocalExecutor:
    opts = MeasureOptions(repeat=2, min_repeat_ms=1.0, n_build_workers=1, run_timeout=20.0)
    return LocalExecutor(target, opts, builder=LocalBuilder(1, 30.0),
                         runner=LocalRunner(target, opts, load_fn=load_or_die))


def _tune(db: Database, executor: LocalExecutor, wl: Any, target: Target,
          job_id: Optional[int] = None) -> Any:
    return tune_loop(wl, target, autotune.config_space(wl, target), executor, trials=1,
                     tuner="random", db=db, retime=0, job_id=job_id)


def test_lost_twice_is_transient_then_replaced_by_a_later_measurement(tmp_path, monkeypatch
                                                                      ) -> None:
    target = Target("llvm")
    wl = autotune.workload("matmul", M=32, N=32, K=32)
    default = autotune.config_space(wl, target).default().index
    monkeypatch.setenv(DIE_DIR, str(tmp_path))
    for n in range(2):  # the first attempt and its retry are both killed
        (tmp_path / f"die-{n}").touch()
    db = Database.open(f"sqlite:///{tmp_path / 'transient.db'}")
    try:
        with _executor(target) as executor:
            first = _tune(db, executor, wl, target)
            assert dict(first.errors) == {"transient": 1}
            (record,) = db.trials_for(wl, target)
            assert record.config_index == default and record.error == "transient"
            assert "signal 9" in record.error_msg
            assert db.best(wl, target) is None
            assert db.measured_indices(wl, target) == set()  # no verdict: free to measure

            # A later run (the deaths are used up) measures the same config again, and its
            # valid record replaces the transient one.
            second = _tune(db, executor, wl, target)
        assert second.best_config is not None and second.best_config.index == default
        (record,) = db.trials_for(wl, target)
        assert record.config_index == default and record.error == "none"
        best = db.best(wl, target)
        assert best is not None and best.config_index == default and best.cost > 0
    finally:
        db.dispose()


def test_transient_records_are_replaced_but_never_taught_or_best(tmp_path) -> None:
    """The database and the loop without measuring: a transient record gives way to any
    later record of its config, and the tuner neither skips nor learns from it."""
    from autotune.search import Tuner

    target = Target("llvm")
    wl = autotune.workload("matmul", M=16, N=16, K=16)
    sp = autotune.config_space(wl, target)
    cfg = sp.default()
    db = Database.open(f"sqlite:///{tmp_path / 'records.db'}")
    lost = MeasureResult.failure(ErrorKind.TRANSIENT, "runner lost twice")
    try:
        assert db.add_trials(wl, target, None, [(cfg, lost)], wl.flops()) == 1
        assert db.add_trials(wl, target, None, [(cfg, lost)], wl.flops()) == 1
        taught: list[Any] = []

        class Spy(Tuner):
            name = "spy"

            def _observe(self, configs: Any, scores: Any) -> None:
                taught.extend(c.index for c in configs)

        class Answer(Executor):
            def submit(self, inputs: Any) -> list[MeasureResult]:
                return [MeasureResult(costs=(1e-3,)) for _ in inputs]

            def close(self) -> None: ...

        result = tune_loop(wl, target, sp, Answer(), trials=1, tuner=Spy, db=db, retime=0)
        assert result.best_config is not None and result.best_config.index == cfg.index
        assert taught == [cfg.index]  # only the new measurement, not the transient record
        (new,) = db.trials_for(wl, target)
        assert new.error == "none" and new.cost == 1e-3
        assert db.add_trials(wl, target, None, [(cfg, lost)], wl.flops()) == 0  # a verdict
        assert db.best(wl, target).config_index == cfg.index
    finally:
        db.dispose()
