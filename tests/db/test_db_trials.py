"""Trial records: insertion, de-duplication, best/top, history and per-job listings."""
from __future__ import annotations

import time

import pytest

from autotune.db import Database
from autotune.measure.result import ErrorKind, MeasureResult
from autotune.search.result import Retimed

FLOPS = 2 * 64**3


def test_add_trials_records_valid_and_failed_results(db: Database, make) -> None:
    w, t = make.workload(), make.target()
    items = [(make.config(1), make.ok(3e-4, 1e-4, 2e-4, tflops=1.5)),
             (make.config(2), make.fail(ErrorKind.RUNTIME, "segfault"))]
    assert db.add_trials(w, t, None, items, FLOPS) == 2
    good, bad = db.trials_for(w, t)
    assert good.config == {"index": 1, "knobs": {"tile_x": 1}}
    assert good.config_index == 1 and good.costs == (3e-4, 1e-4, 2e-4)
    assert good.cost == 2e-4 and good.gflops == pytest.approx(FLOPS / 2e-4 / 1e9)
    assert good.error == "none" and good.ok and good.extra == {"tflops": 1.5}
    assert (good.build_s, good.run_s, good.timestamp) == (0.25, 0.5, 1700000000.5)
    assert good.workload_key == w.key and good.target_key == t.key and good.id is not None
    assert bad.error == "runtime" and bad.error_msg == "segfault" and not bad.ok
    assert bad.cost is None and bad.gflops is None and bad.costs == ()


def test_add_trials_skips_configs_already_recorded(db: Database, make) -> None:
    w, t = make.workload(), make.target()
    first = [(make.config(i), make.ok(1e-3)) for i in range(4)]
    assert db.add_trials(w, t, None, first, FLOPS) == 4
    again = [(make.config(i), make.ok(5e-4)) for i in range(2, 6)]
    assert db.add_trials(w, t, None, again, FLOPS) == 2
    # A duplicate inside one batch is inserted once.
    assert db.add_trials(w, t, None, [(make.config(9), make.ok(1e-3))] * 2, FLOPS) == 1
    assert db.measured_indices(w, t) == {0, 1, 2, 3, 4, 5, 9}
    # The first measurement stands: config 2 keeps its original cost.
    assert {r.config_index: r.cost for r in db.trials_for(w, t)}[2] == 1e-3
    # The same config on another target or workload is a different record.
    zero = [(make.config(0), make.ok(1e-3))]
    assert db.add_trials(w, make.target("llvm -mcpu=other"), None, zero, FLOPS) == 1
    assert db.add_trials(make.workload(m=8), t, None, zero, FLOPS) == 1
    assert db.add_trials(w, t, None, [], FLOPS) == 0


def test_best_and_top_ignore_failed_trials(db: Database, make) -> None:
    w, t = make.workload(), make.target()
    assert db.best(w, t) is None and db.top(w, t, 3) == []
    items = [
        (make.config(1), make.ok(4e-3)),
        (make.config(2), make.fail(ErrorKind.COMPILE)),
        (make.config(3), make.ok(2e-3)),
        # Fast but wrong: a wrong kernel is never best, whatever its timings.
        (make.config(4), MeasureResult(costs=(1e-9,), error=ErrorKind.WRONG_ANSWER,
                                       error_msg="mismatch")),
        (make.config(5), make.ok(3e-3)),
        (make.config(6), make.fail(ErrorKind.RUN_TIMEOUT)),
    ]
    db.add_trials(w, t, None, items, FLOPS)
    best = db.best(w, t)
    assert best is not None and best.config_index == 3 and best.cost == 2e-3
    assert [r.config_index for r in db.top(w, t, 10)] == [3, 5, 1]
    assert [r.config_index for r in db.top(w.key, t.key, 2)] == [3, 5]  # plain keys work too
    assert db.best(make.workload(m=1), t) is None


def test_huge_config_indices_round_trip(db: Database, make) -> None:
    w, t = make.workload(), make.target()
    huge = [2**63 + 11, 10**30, 0]
    db.add_trials(w, t, None, [(make.config(i), make.ok(1e-3)) for i in huge], FLOPS)
    assert db.measured_indices(w, t) == set(huge)
    assert sorted(r.config_index for r in db.trials_for(w, t)) == sorted(huge)


def test_history_is_other_workloads_of_same_op_and_target_kind(db: Database, make) -> None:
    mine, other, other2 = make.workload(m=1), make.workload(m=2), make.workload(m=3)
    conv = make.workload("fake_conv2d", n=1)
    cpu, cpu2 = make.target(), make.target("llvm -mcpu=othercpu")
    gpu = make.target("cuda -arch=sm_90")
    one = [(make.config(0), make.ok(1e-3)), (make.config(1), make.fail())]
    for w, t in [(mine, cpu), (other, cpu), (other2, cpu2), (conv, cpu), (other, gpu)]:
        db.add_trials(w, t, None, one, FLOPS)
    hist = db.history("fake_matmul", "llvm", exclude_workload_key=mine.key)
    assert set(hist) == {other.key, other2.key}
    assert all(len(records) == 2 for records in hist.values())  # failures are training data too
    assert {r.target_key for r in hist[other.key]} == {cpu.key}
    assert set(db.history("fake_matmul", "llvm", None)) == {mine.key, other.key, other2.key}
    assert set(db.history("fake_matmul", "cuda", mine.key)) == {other.key}
    assert db.history("fake_dense", "llvm", None) == {}


def _job_with_trials(db: Database, make) -> int:
    w, t = make.workload(), make.target()
    job = db.create_job(workload=w, target=t, tuner="random", trials=20, options={})
    costs = {1: 5e-3, 2: 1e-3, 3: None, 4: 2e-3, 5: None, 6: 4e-3, 7: 3e-3}
    items = [(make.config(i), make.ok(c) if c else make.fail(ErrorKind.COMPILE))
             for i, c in costs.items()]
    db.add_trials(w, t, job.id, items, FLOPS)
    db.add_trials(w, t, None, [(make.config(100), make.ok(1e-9))], FLOPS)  # not this job's
    return job.id


def test_job_trials_paging_sorting_and_filtering(db: Database, make) -> None:
    job_id = _job_with_trials(db, make)
    assert db.job_trial_count(job_id) == 7

    def order(**kw) -> tuple[list[int], int]:
        records, total = db.job_trials(job_id, **kw)
        return [r.config_index for r in records], total

    assert order() == ([1, 2, 3, 4, 5, 6, 7], 7)
    assert order(sort="-id", limit=3) == ([7, 6, 5], 7)
    assert order(offset=5, limit=10) == ([6, 7], 7)
    # Failed trials (no cost, no gflops) come last in either direction.
    assert order(sort="cost") == ([2, 4, 7, 6, 1, 3, 5], 7)
    assert order(sort="-cost") == ([1, 6, 7, 4, 2, 3, 5], 7)
    assert order(sort="-gflops") == ([2, 4, 7, 6, 1, 3, 5], 7)
    assert order(sort="gflops") == ([1, 6, 7, 4, 2, 3, 5], 7)
    assert order(error="compile") == ([3, 5], 2)
    assert order(error="none", sort="cost", limit=2) == ([2, 4], 5)
    assert order(offset=50) == ([], 7)
    with pytest.raises(ValueError, match="sort"):
        db.job_trials(job_id, sort="speed")


def test_job_trials_since_streams_new_records(db: Database, make) -> None:
    job_id = _job_with_trials(db, make)
    records = db.job_trials_since(job_id, 0)
    assert [r.config_index for r in records] == [1, 2, 3, 4, 5, 6, 7]
    assert all(r.job_id == job_id for r in records)
    assert db.job_trials_since(job_id, records[4].id) == records[5:]
    assert db.job_trials_since(job_id, records[-1].id) == []
    assert len(db.job_trials_since(job_id, 0, limit=2)) == 2


def test_trial_records_are_frozen(db: Database, make) -> None:
    w, t = make.workload(), make.target()
    db.add_trials(w, t, None, [(make.config(0), make.ok(1e-3))], FLOPS)
    record = db.best(w, t)
    with pytest.raises(AttributeError):
        record.cost = 0.0  # type: ignore[misc, union-attr]


@pytest.mark.serial
def test_batch_of_64_inserts_quickly_on_sqlite(tmp_path, make) -> None:
    db = Database.open(f"sqlite:///{tmp_path / 'speed.db'}")
    w, t = make.workload(), make.target()
    db.add_trials(w, t, None, [(make.config(10**6), make.ok(1e-3))], FLOPS)  # warm caches
    times = []
    for batch in range(5):
        items = [(make.config(batch * 64 + i), make.ok(1e-3, 2e-3, 3e-3)) for i in range(64)]
        start = time.perf_counter()
        assert db.add_trials(w, t, None, items, FLOPS) == 64
        times.append(time.perf_counter() - start)
    # Best of five: the machine is shared, and one slow batch says nothing about the code.
    db.dispose()
    assert min(times) < 0.020, times


def test_the_latest_accepted_retiming_window_ranks_first(db: Database, make) -> None:
    w, t = make.workload(), make.target()
    db.add_trials(w, t, None, [(make.config(1), make.ok(1e-3)), (make.config(2), make.ok(2e-3)),
                               (make.config(3), make.ok(5e-4)), (make.config(4), make.fail())],
                  FLOPS)
    assert db.best(w, t).config_index == 3  # no window yet: the fastest first measurement
    window = [Retimed(1, 1e-3, 1.2e-3, (1.2e-3,) * 3), Retimed(2, 2e-3, 1.1e-3, (1.1e-3,) * 3)]
    assert db.record_retiming(w, t, window, accepted=True) == 2
    # A re-timed figure is never ranked against a first measurement: config 3's 0.5 ms was
    # never compared with them in one window.
    top = db.top(w, t, 5)
    assert [r.config_index for r in top] == [2, 1, 3]
    best = db.best(w, t)
    assert best.ranked_cost == 1.1e-3 and best.retimed_cost == 1.1e-3
    assert best.cost == 2e-3 and best.costs == (2e-3,)  # the first measurement stays
    assert best.ranked_gflops == pytest.approx(FLOPS / 1.1e-3 / 1e9)
    assert best.extra["retime"]["status"] == "ok" and best.extra["retime"]["costs"] == [1.1e-3] * 3
    assert top[2].ranked_cost == top[2].cost == 5e-4 and top[2].retimed_cost is None

    # A window set aside (noisy) changes no figure; its members' records say so.
    noisy = [Retimed(3, 5e-4, 1.5e-3, (1.5e-3,), status="noisy", ratio=3.0, attempts=3)]
    assert db.record_retiming(w, t, noisy, accepted=False) == 1
    assert db.best(w, t).config_index == 2
    three = next(r for r in db.trials_for(w, t) if r.config_index == 3)
    assert three.retimed_cost is None and three.extra["retime"]["status"] == "noisy"

    # The next accepted window replaces the last: only its members keep a figure.
    assert db.record_retiming(w, t, [Retimed(2, 2e-3, 1.3e-3, (1.3e-3,)),
                                     Retimed(3, 5e-4, 1.0e-3, (1.0e-3,))], accepted=True) == 2
    assert [(r.config_index, r.retimed_cost) for r in db.top(w, t, 5)] == [
        (3, 1.0e-3), (2, 1.3e-3), (1, None)]

    # A re-run that answered wrong: the record is no longer valid, whatever the window.
    wrong = Retimed(3, 5e-4, None, (), error="wrong_answer", error_msg="off by 1",
                    disqualified=True)
    assert db.record_retiming(w, t, [wrong, Retimed(2, 2e-3, 1.3e-3, (1.3e-3,))],
                              accepted=True) == 2
    bad = next(r for r in db.trials_for(w, t) if r.config_index == 3)
    assert bad.error == "wrong_answer" and bad.error_msg == "on re-timing: off by 1"
    assert bad.gflops is None and bad.retimed_cost is None
    assert db.best(w, t).config_index == 2
    # failed and unknown records are left alone
    assert db.record_retiming(w, t, [Retimed(4, 1e-3, 1e-3, (1e-3,)),
                                     Retimed(99, 1e-3, 1e-3, (1e-3,))], accepted=True) == 0


def test_trials_record_their_worker_and_jobs_count_trials_per_worker(db: Database, make) -> None:
    w, t = make.workload(), make.target()
    job = db.create_job(workload=w, target=t, tuner="random", trials=8, options={})

    def by(worker: str) -> dict:
        return {"worker": worker, "host": "h", "device": "cpu", "version": "0"}

    items = [(make.config(1), make.ok(1e-3, measured_by=by("a/cpu"))),
             (make.config(2), make.ok(2e-3, measured_by=by("a/cpu"))),
             (make.config(3), MeasureResult.failure(ErrorKind.RUNTIME, "lost",
                                                    extra={"measured_by": by("b/cpu")})),
             (make.config(4), make.ok(1e-3)),                            # no provenance
             (make.config(5), make.ok(1e-3, measured_by="not a dict"))]  # tolerated
    db.add_trials(w, t, job.id, items, FLOPS)
    assert [r.worker for r in db.trials_for(w, t)] == ["a/cpu", "a/cpu", "b/cpu", None, None]
    assert db.job_workers(job.id) == [("", 2, 0), ("a/cpu", 2, 0), ("b/cpu", 1, 1)]
    assert db.job_workers(job.id + 1) == []
