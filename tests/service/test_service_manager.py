"""The job manager in-process on a real SQLite database, with a fake tuning loop: claiming,
waking on submit, cancels and lost leases seen by the heartbeat, waiting executors, database
errors in the worker loop, and handing jobs over on shutdown."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator, Optional

import pytest
import sqlalchemy as sa

from autotune.db import Database, JobRecord
from autotune.job_options import JobOptions, MeasureOverrides
from autotune.measure.executor import Executor
from autotune.ops import Workload
from autotune.service.executors import ExecutorPool
from autotune.service.manager import JobManager
from autotune.service.validation import JobSpec
from autotune.target import Target
from tests.service.service_helpers import SMALL_MATMUL, wait_for

pytestmark = pytest.mark.timeout(120)


class SlowTune:
    """Runs ``batches`` batches of ``batch_s`` seconds, asking the callbacks after each;
    with ``before`` called first with the executor it was given."""

    def __init__(self, batches: int = 1000, batch_s: float = 0.05,
                 before: Optional[Callable[[Any], None]] = None) -> None:
        self.batches, self.batch_s, self.before = batches, batch_s, before
        self.calls: list[int] = []
        self.done: dict[int, int] = {}  # batches run, by job

    def __call__(self, workload: Workload, target: Target, *, job_id: int, executor: Any,
                 callbacks: list[Callable[[Any], Any]], **kwargs: Any) -> None:
        self.calls.append(job_id)
        if self.before is not None:
            self.before(executor)
        for _ in range(self.batches):
            time.sleep(self.batch_s)
            self.done[job_id] = self.done.get(job_id, 0) + 1
            if any([cb(None) is False for cb in callbacks]):
                return


class FlakyDatabase(Database):
    """The real database, except that the first ``claims`` claims and ``releases`` releases
    fail as if the server were unreachable."""

    def __init__(self, url: str, *, claims: int = 0, releases: int = 0) -> None:
        super().__init__(url)
        self.failures = {"claim": claims, "release": releases}

    def _fail(self, what: str) -> None:
        if self.failures[what] > 0:
            self.failures[what] -= 1
            raise sa.exc.OperationalError(what, {}, Exception("server closed the connection"))

    def claim_job(self, *args: Any, **kwargs: Any) -> Optional[JobRecord]:
        self._fail("claim")
        return super().claim_job(*args, **kwargs)

    def release_job(self, *args: Any, **kwargs: Any) -> Optional[JobRecord]:
        self._fail("release")
        return super().release_job(*args, **kwargs)


@pytest.fixture
def url(tmp_path: Any) -> str:
    url = f"sqlite:///{tmp_path / 'manager.db'}"
    Database.open(url).dispose()
    return url


@pytest.fixture
def managers() -> Iterator[Callable[..., JobManager]]:
    """Makes started managers over a database (closed after the test)."""
    made: list[JobManager] = []

    def make(db: Database, tune: Any, *, pool: Optional[ExecutorPool] = None,
             **kwargs: Any) -> JobManager:
        kwargs = {"workers": 1, "lease_s": 3.0, "poll_s": 0.1, **kwargs}
        manager = JobManager(db, pool or ExecutorPool(lambda target, measure: object()),
                             tune_fn=tune, **kwargs)
        manager.start()
        made.append(manager)
        return manager

    yield make
    for manager in made:
        if not manager.closing:
            manager.close()


def _queue(db: Database, trials: int = 1000) -> JobRecord:
    """A job queued by someone else (another service, straight into the database)."""
    return db.create_job(workload=Workload.from_dict(SMALL_MATMUL), target=Target("llvm"),
                         tuner="random", trials=trials, options={})


def _state(db: Database, job_id: int, *states: str) -> JobRecord:
    return wait_for(lambda: (lambda j: j if j.state in states else None)(db.get_job(job_id)),
                    timeout=20, interval=0.05, what=f"job {job_id} in {states}")


def test_a_job_measures_with_its_own_measure_options(url, managers) -> None:
    made: list[tuple[str, dict[str, Any]]] = []
    given: list[Any] = []

    def factory(target: Target, measure: Any) -> object:
        made.append((target.key, measure.given()))
        return object()

    db = Database(url)
    managers(db, SlowTune(batches=1, before=given.append), pool=ExecutorPool(factory))
    jobs = [db.create_job(workload=Workload.from_dict(SMALL_MATMUL), target=Target("llvm"),
                          tuner="random", trials=4, options=options)
            for options in ({"measure_options": {"repeat": 3}}, {}, {"measure_options": {}})]
    for job in jobs:
        _state(db, job.id, "done")
    key = Target("llvm").key
    assert made == [(key, {"repeat": 3}), (key, {})]  # one executor per set of options
    assert given[0] is not given[1] and given[1].inner is given[2].inner
    db.dispose()


def test_submit_wakes_a_worker_and_finished_jobs_are_released(url, managers) -> None:
    db, tune = Database(url), SlowTune(batches=3)
    manager = managers(db, tune, poll_s=60.0)  # only the submit can wake it in time
    spec = JobSpec(workload=Workload.from_dict(SMALL_MATMUL), target=Target("llvm"),
                   options=JobOptions(tuner="random", trials=12))
    job = manager.submit(spec)
    done = _state(db, job.id, "done")
    assert done.owner is None and done.lease_expires_at is None and done.finished_at
    # the worker forgets the job just after its release commits
    wait_for(lambda: not manager.is_active(job.id), timeout=10, what="the job let go")
    assert tune.calls == [job.id]
    db.dispose()


def test_a_cancel_written_by_another_process_stops_the_job(url, managers) -> None:
    db, tune = Database(url), SlowTune()
    manager = managers(db, tune)
    job = _queue(db)
    running = _state(db, job.id, "running")
    assert running.owner == manager.owner
    wait_for(lambda: tune.done.get(job.id, 0) >= 2, timeout=10, what="two batches")
    elsewhere = Database(url)  # another service: it only writes the database
    elsewhere.set_job_state(job.id, "cancelled", from_states=["queued", "running"])
    elsewhere.dispose()
    wait_for(lambda: db.get_job(job.id).owner is None, timeout=10, what="the job released")
    final = db.get_job(job.id)
    assert final.state == "cancelled" and tune.done[job.id] < 1000
    assert not manager.is_active(job.id)
    db.dispose()


def test_a_lost_lease_stops_the_job_and_leaves_it_to_the_new_owner(url, managers) -> None:
    db, tune = Database(url), SlowTune()
    manager = managers(db, tune)
    job = _queue(db)
    _state(db, job.id, "running")
    with db.engine.begin() as conn:  # as if we had been paused past the lease
        conn.execute(sa.text("UPDATE jobs SET owner = 'elsewhere:1:aa' WHERE id = :id"),
                     {"id": job.id})
    wait_for(lambda: not manager.is_active(job.id), timeout=10, what="the job to stop here")
    left = db.get_job(job.id)
    assert left.state == "running" and left.owner == "elsewhere:1:aa"
    db.dispose()


def test_database_errors_do_not_end_the_workers(url, managers) -> None:
    # Claiming fails twice, then releasing the finished job once: the worker backs off and
    # claims again, and retries the release, so the job ends done without running again.
    db, tune = FlakyDatabase(url, claims=2, releases=1), SlowTune(batches=2)
    manager = managers(db, tune, lease_s=1.0)
    job = _queue(db)
    done = _state(db, job.id, "done")
    assert db.failures == {"claim": 0, "release": 0}
    assert tune.calls == [job.id] and done.owner is None
    assert all(thread.is_alive() for thread in manager._threads)
    db.dispose()


class FakeClusterExecutor(Executor):
    """Stands in for the Ray executor: ``for_job`` gives a job's view, which waits for a
    device until ``arrived`` is set."""

    def __init__(self) -> None:
        self.arrived = threading.Event()

    def for_job(self, *, job_id: int, on_wait: Callable[[Optional[str]], None],
                should_stop: Callable[[], bool]) -> Any:
        executor = self

        class JobView(Executor):
            def submit(self, inputs: Any) -> list[Any]:
                on_wait("no live worker for target llvm -mcpu=test")
                executor.arrived.wait(20)
                on_wait(None)
                return []

        return JobView()


def test_a_waiting_executor_shows_why_the_job_waits(url, managers) -> None:
    db, cluster = Database(url), FakeClusterExecutor()
    pool = ExecutorPool(lambda target, measure: cluster, locked=False)
    manager = managers(db, SlowTune(batches=2, before=lambda ex: ex.submit([])), pool=pool,
                       lease_s=2.0)
    job = _queue(db)
    waiting = wait_for(lambda: (lambda j: j if j.waiting else None)(db.get_job(job.id)),
                       timeout=20, interval=0.05, what="the job to say why it waits")
    assert waiting.state == "queued"
    assert waiting.waiting == "no live worker for target llvm -mcpu=test"
    assert waiting.owner == manager.owner
    time.sleep(2.5)  # past the first lease: the heartbeat keeps a waiting job
    assert db.claim_job("host-b:2:bb", 30.0) is None
    cluster.arrived.set()
    done = _state(db, job.id, "done")
    assert done.waiting is None and done.owner is None
    db.dispose()


def test_close_hands_running_jobs_over(url, managers) -> None:
    db, first = Database(url), SlowTune()
    manager = managers(db, first)
    job = _queue(db)
    _state(db, job.id, "running")
    manager.close()
    left = db.get_job(job.id)
    assert left.state == "running" and left.owner is None and left.lease_expires_at is None
    second = SlowTune(batches=2)
    successor = managers(db, second, poll_s=60.0)  # claims at start: no lease to wait for
    done = _state(db, job.id, "done")
    assert second.calls == [job.id] and done.owner is None
    assert successor.owner != manager.owner
    db.dispose()


def test_a_library_job_taken_over_keeps_its_batch_size(url, managers) -> None:
    """`autotune.tune` writes its job's `JobOptions` (batch size included); a service that
    resumes the job after its process died tunes with them."""
    import socket

    given: list[dict[str, Any]] = []
    db = Database(url)
    dead = f"{socket.gethostname()}:{2**31 - 2}:cafe"  # a process of this host that is gone
    options = JobOptions(tuner="random", trials=24, batch_size=16, seed=5, early_stopping=9,
                         measure=MeasureOverrides(repeat=2))
    job = db.create_job(workload=Workload.from_dict(SMALL_MATMUL), target=Target("llvm"),
                        tuner="random", trials=24, owner=dead, lease_s=3600,
                        options=options.to_json())
    made: list[dict[str, Any]] = []
    pool = ExecutorPool(lambda target, measure: made.append(measure.given()) or object())
    managers(db, lambda *args, **kwargs: given.append(kwargs), pool=pool)
    _state(db, job.id, "done")
    (call,) = given
    assert (call["batch_size"], call["seed"], call["early_stopping"], call["trials"]) == (
        16, 5, 9, 24)
    assert made == [{"repeat": 2}]
    db.dispose()
