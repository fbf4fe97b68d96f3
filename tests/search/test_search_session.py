"""TuningSession stepped from outside: the same search as tune_loop's, batch by batch, two
sessions taking turns on one executor, and the protocols' defaults."""
from __future__ import annotations

from contextlib import contextmanager

import pytest

from autotune.measure.executor import Executor
from autotune.search import TuningSession, tune_loop
from autotune.search.store import TrialStore
from autotune.search.synthetic import SyntheticExecutor


def test_stepping_by_hand_is_tune_loop(wl, target, space, objective):
    driven = tune_loop(wl, target, space, SyntheticExecutor(objective), tuner="ga", trials=24,
                       batch_size=8, seed=5, retime=0)
    executor = SyntheticExecutor(objective)
    with TuningSession(wl, target, space, trials=24, tuner="ga", batch_size=8, seed=5) as s:
        sizes = []
        while inputs := s.next_batch():
            sizes.append(len(inputs))
            progress = s.record(executor.submit(inputs))
            assert progress.trials_done == sum(sizes)
        stepped = s.finish(executor, retime=0)
    assert sizes == [8, 8, 8] and stepped.stopped == "budget"
    assert stepped.history == driven.history
    assert stepped.best_config.index == driven.best_config.index


def test_two_sessions_take_turns_on_one_executor(wl, target, space, objective):
    executor = SyntheticExecutor(objective)
    a = TuningSession(wl, target, space, trials=16, tuner="random", seed=1)
    b = TuningSession(wl, target, space, trials=8, tuner="random", seed=2)
    order = []
    with a, b:
        live = {"a": a, "b": b}
        while live:
            for name, s in list(live.items()):
                inputs = s.next_batch()
                if not inputs:
                    del live[name]
                    continue
                s.record(executor.submit(inputs))
                order.append(name)
        results = a.finish(executor, retime=0), b.finish(executor, retime=0)
    assert order == ["a", "b", "a"]
    assert [r.trials for r in results] == [16, 8]


def test_a_batch_must_be_recorded_before_the_next(wl, target, space, objective):
    with TuningSession(wl, target, space, trials=16, tuner="random") as s:
        inputs = s.next_batch()
        with pytest.raises(RuntimeError, match="record"):
            s.next_batch()
        with pytest.raises(RuntimeError, match="3 results for 8 inputs"):
            s.record(SyntheticExecutor(objective).submit(inputs)[:3])


def test_a_stopped_session_proposes_nothing_and_skips_retiming(wl, target, space, objective):
    executor = SyntheticExecutor(objective)
    with TuningSession(wl, target, space, trials=64, tuner="random") as s:
        s.record(executor.submit(s.next_batch()))
        s.stop("callback")
        assert s.next_batch() == []
        result = s.finish(executor)
    assert result.stopped == "callback" and result.retimed == () and result.trials == 8


def test_executor_and_store_protocols_have_defaults(wl, target, space, objective):
    """An executor that only submits, and a store that only keeps trials, work as they are:
    no host lock, no preferred batch, no pinning, no job, no windows kept."""

    class Bare(Executor):
        def __init__(self) -> None:
            self.inner = SyntheticExecutor(objective)

        def submit(self, inputs):
            return self.inner.submit(inputs)

    class Trials(TrialStore):
        def __init__(self) -> None:
            self.rows = []

        def trials_for(self, workload, target):
            return []

        def add_trials(self, workload, target, job_id, items, flops):
            self.rows.extend(items)
            return len(items)

    bare, store = Bare(), Trials()
    assert bare.preferred_batch() == 0 and bare.for_job(job_id=1) is bare
    with bare.pinned() as one, bare.host_work():
        assert one is bare
    assert store.best(wl, target) is None and store.history("matmul", "llvm") == {}
    result = tune_loop(wl, target, space, bare, trials=16, tuner="random", db=store, job_id=3)
    assert result.trials == 16 and len(store.rows) == 16 and result.retimed


def test_pinned_executors_take_the_final_retiming(wl, target, space, objective):
    class Cluster(SyntheticExecutor):
        pinned_calls = 0

        @contextmanager
        def pinned(self):
            Cluster.pinned_calls += 1
            yield self

    tune_loop(wl, target, space, Cluster(objective), trials=16, tuner="random", retime=3)
    assert Cluster.pinned_calls == 1


def test_a_job_that_must_stop_ends_its_batch_or_its_window_unwritten(wl, target, space,
                                                                     objective, db):
    """An executor that gives up a batch (`MeasureStopped`: the job was cancelled) ends the
    search as a stopping callback would: that batch and any re-timing window unwritten."""
    from autotune.measure import MeasureStopped

    class GivesUp(SyntheticExecutor):
        def __init__(self, after: int) -> None:
            super().__init__(objective)
            self.left = after

        def submit(self, inputs):
            if self.left == 0:
                raise MeasureStopped("the job must stop")
            self.left -= 1
            return super().submit(inputs)

    mid_batch = tune_loop(wl, target, space, GivesUp(after=1), tuner="random", trials=40,
                          db=db)
    assert (mid_batch.stopped, mid_batch.trials, mid_batch.retimed) == ("callback", 8, ())
    assert len(db.trials_for(wl, target)) == 8
    mid_window = tune_loop(wl, target, space, GivesUp(after=1), tuner="random", trials=8,
                           db=db, seed=1)  # its one batch, then the window gives up
    assert (mid_window.stopped, mid_window.trials, mid_window.retimed) == ("callback", 8, ())
    records = db.trials_for(wl, target)
    assert len(records) == 16 and all(r.retimed_cost is None for r in records)
    assert not any("retime" in r.extra for r in records)
