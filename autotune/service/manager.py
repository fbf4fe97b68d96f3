"""`JobManager`: worker threads that claim persisted jobs from the database and run them.

Jobs live in the database only. Each worker thread claims the oldest job nobody runs (see
`Database.claim_job`) under this manager's owner id and runs it, resuming from its recorded
trials (``tune`` with the job's id), while a `LeaseKeeper` renews the leases of the jobs
running here. So several services (and `autotune tune` runs) can share one database: each job
runs in one process at a time, and the job of a process that died is taken over once its
lease runs out, or at once when that process was on this host. Cancelling only writes the
database; the process running the job gives up its batch in flight within a second or so
(fenced: nothing is written for it after the cancel). Threads suffice:
building and timing happen in the executors' child processes.
"""
from __future__ import annotations

import logging
import threading
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable, Optional

from autotune.api import tune
from autotune.db import Database, JobRecord
from autotune.db.lease import LeaseKeeper, held_job, new_owner
from autotune.job_options import JobOptions
from autotune.ops import Workload
from autotune.service.executors import ExecutorPool
from autotune.service.job_errors import (
    HAND_OVER,
    DbRetry,
    ErrorKind,
    backoff_s,
    classify,
    is_transient_db_error,
)
from autotune.service.notifier import Notifier
from autotune.target import Target

if TYPE_CHECKING:
    from autotune.search.result import Progress
    from autotune.service.validation import JobSpec

log = logging.getLogger("autotune.service")

TuneFn = Callable[..., Any]
Outcome = tuple[Optional[str], Optional[str]]  # the state and error a job is released with


class QueueFull(Exception):
    """A submit refused because too many jobs are queued; the message says so."""


def default_tune(*args: Any, **kwargs: Any) -> Any:
    return tune(*args, progress=False, **kwargs)  # jobs' progress is the dashboard's


class JobManager:
    """Runs up to ``workers`` jobs at once, one shared executor per target and measure
    options (see executors).

    ``lease_s``: how long a job's lease lasts unless renewed; ``poll_s``: how often an idle
    worker looks for jobs submitted elsewhere (a local submit wakes one at once);
    ``db_retry_s``: how long a job's database errors are retried (with backoff) before the
    job fails with the error. A watchdog thread restarts dead workers every ``watch_s`` and
    closes the executors of idle targets (`ExecutorPool.evict_idle`).
    """

    def __init__(self, db: Database, executors: ExecutorPool, *, workers: int,
                 notifier: Optional[Notifier] = None, tune_fn: TuneFn = default_tune,
                 lease_s: float = 30.0, poll_s: float = 1.0, db_retry_s: float = 300.0,
                 watch_s: float = 5.0) -> None:
        self.db, self.executors, self.workers = db, executors, workers
        self.lease_s, self.poll_s, self.db_retry_s, self.watch_s = \
            lease_s, poll_s, db_retry_s, watch_s
        self.notifier = notifier or Notifier()
        self.owner = new_owner()
        self.leases = LeaseKeeper(db, self.owner, lease_s)
        self._tune = tune_fn
        self._wake = threading.Event()  # set by a local submit and by close
        self._closed = threading.Event()  # set by close: ends backoff waits at once
        self._lock = threading.Lock()
        self._active: set[int] = set()      # jobs a worker is running now
        self._stop_jobs: set[int] = set()   # running jobs cancelled here: stop after their batch
        self._threads: list[threading.Thread] = []
        self._watchdog: Optional[threading.Thread] = None
        self.restarted = 0  # worker threads found dead and started again
        self.closing = False

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the lease keeper, the workers and their watchdog."""
        self.leases.start()
        with self._lock:
            self._threads = [self._start_worker(i) for i in range(self.workers)]
        self._watchdog = threading.Thread(target=self._watch, name="autotune-job-watchdog",
                                          daemon=True)
        self._watchdog.start()
        log.info("running jobs as %s", self.owner)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the running jobs after their batch and release them (still 'running', so that
        another service, or this one restarted, takes them over at once); stop the executors."""
        self.closing = True
        self._closed.set()
        self._wake.set()
        self._join(timeout)
        self.notifier.close()
        # Closing the executors ends a batch still in flight; its worker then releases the job.
        self.executors.close()
        self._join(timeout)
        self.leases.stop()

    def _join(self, timeout: float) -> None:
        with self._lock:
            threads = list(self._threads)
        for thread in threads + [t for t in (self._watchdog,) if t is not None]:
            thread.join(timeout)

    def _start_worker(self, i: int) -> threading.Thread:
        thread = threading.Thread(target=self._work_logged, name=f"autotune-job-{i}",
                                  daemon=True)
        thread.start()
        return thread

    def ensure_workers(self) -> int:
        """Start again each worker thread that died (logged as it died); returns how many."""
        if self.closing:
            return 0
        with self._lock:
            dead = [i for i, t in enumerate(self._threads) if not t.is_alive()]
            for i in dead:
                self._threads[i] = self._start_worker(i)
            self.restarted += len(dead)
        for i in dead:
            log.error("job worker %d had died: started again", i)
        return len(dead)

    def health(self) -> dict[str, Any]:
        """Live worker threads (dead ones are started again first), restarts so far, whether
        the lease keeper runs, and the open executors' target keys."""
        self.ensure_workers()
        with self._lock:
            alive = sum(t.is_alive() for t in self._threads)
        return {"job_threads": alive, "job_threads_restarted": self.restarted,
                "lease_keeper": self.leases.running(),
                "executors": sorted(self.executors.executors())}

    def _watch(self) -> None:
        while not self._closed.wait(self.watch_s):
            try:
                self.ensure_workers()
                self.executors.evict_idle()
            except Exception:  # the watchdog must outlive anything it watches
                log.exception("job watchdog round failed")

    # -- requests -------------------------------------------------------------------------

    def submit(self, spec: "JobSpec", *, max_queued: Optional[int] = None) -> JobRecord:
        """Persist a queued job and wake a worker to claim it; `QueueFull` when ``max_queued``
        jobs already wait (counted in the database, so a soft limit under concurrent submits)."""
        if max_queued is not None:
            _, queued = self.db.list_jobs(state="queued", limit=1)
            if queued >= max_queued:
                raise QueueFull(f"the job queue is full: {queued} jobs are queued, the limit "
                                "(AUTOTUNE_MAX_QUEUED_JOBS); retry when some have started")
        job = self.db.create_job(workload=spec.workload, target=spec.target,
                                 tuner=spec.options.tuner, trials=spec.options.trials,
                                 options=spec.options.to_json())
        self._wake.set()
        self.notifier.publish(job.id)
        return job

    def cancel(self, job_id: int) -> Optional[JobRecord]:
        """Cancel a queued or running job; a running one gives up its batch in flight here
        at once or, when another process runs it, once that process reads the cancel (within
        a second), and nothing more is written for it.

        Returns the job (unchanged when it had already ended), or None when there is none.
        """
        job = self.db.set_job_state(job_id, "cancelled", from_states=["queued", "running"])
        if job is None:
            return self.db.get_job(job_id)
        with self._lock:
            if job_id in self._active:
                self._stop_jobs.add(job_id)
        self.notifier.publish(job_id)
        return job

    def is_active(self, job_id: int) -> bool:
        """Whether a worker of this process is still running the job (its last batch may be
        in flight); other processes' jobs are never active here."""
        with self._lock:
            return job_id in self._active

    # -- workers --------------------------------------------------------------------------

    def _work_logged(self) -> None:
        try:
            self._work()
        finally:
            if not self.closing:  # only a BaseException gets here: the watchdog restarts it
                log.error("job worker %s died:\n%s", threading.current_thread().name,
                          traceback.format_exc())

    def _work(self) -> None:
        failures = 0  # claims that failed in a row: back off while the database is away
        while not self.closing:
            self._wake.clear()  # before claiming: a submit from now on wakes the wait below
            try:
                job = self.db.claim_job(self.owner, self.lease_s)
                failures = 0
            except Exception as err:  # the database may come back: log and keep polling
                failures += 1
                log.error("claiming a job failed (%d in a row): %s: %s", failures,
                          type(err).__name__, err)
                self._closed.wait(backoff_s(failures, cap=max(self.poll_s, 10.0)))
                continue
            if job is None:
                self._wake.wait(self.poll_s)
                continue
            with self._lock:
                running_here = job.id in self._active
            if running_here:
                # Its lease ran out while the database was unreachable, and another worker
                # here still runs it: that run goes on under the lease just taken.
                continue
            try:
                self._run_claimed(job)
            except Exception:  # never let one job's bookkeeping end the worker
                log.error("job %d: worker error:\n%s", job.id, traceback.format_exc())

    def _run_claimed(self, job: JobRecord) -> None:
        with self._lock:
            self._active.add(job.id)
        try:
            with held_job(self.leases, job.id, release=self._release) as held:
                self.notifier.publish(job.id)
                held.end(*self._run(job))
        finally:
            with self._lock:
                self._active.discard(job.id)
                self._stop_jobs.discard(job.id)
            self.notifier.publish(job.id)

    def _release(self, job_id: int, state: Optional[str], error: Optional[str]) -> None:
        """Release the job with its final state, retrying database errors with backoff for
        ``db_retry_s`` (a lock held for a while must not lose a finished job's state)."""
        deadline, attempt = time.monotonic() + self.db_retry_s, 0
        while True:
            try:
                self.db.release_job(job_id, self.owner, state=state, error=error)
                return
            except Exception as err:
                attempt += 1
                if not is_transient_db_error(err) or time.monotonic() >= deadline \
                        or self._closed.wait(backoff_s(attempt)):
                    # Its lease runs out and the next claim resumes the job.
                    log.error("job %d: releasing it failed (attempt %d): %s: %s", job_id,
                              attempt, type(err).__name__, err)
                    return
                log.warning("job %d: releasing it failed (attempt %d), retrying: %s: %s",
                            job_id, attempt, type(err).__name__, err)

    def _stop_reason(self, job_id: int) -> Optional[str]:
        """Why the job must stop now ("shutdown", "cancelled", "lost", "expired")."""
        if self.closing:
            return "shutdown"
        with self._lock:
            if job_id in self._stop_jobs:
                return "cancelled"
        return self.leases.stopping(job_id)

    def _on_wait(self, job_id: int, reason: Optional[str]) -> None:
        """The executor waits for a device (``reason``), or goes on (None): show it."""
        try:
            self.db.set_job_waiting(job_id, self.owner, reason)
        except Exception:  # only the job's display suffers
            log.error("job %d: recording that it waits failed:\n%s", job_id,
                      traceback.format_exc())
        self.notifier.publish(job_id)

    def _run(self, job: JobRecord) -> Outcome:
        """Run a claimed job; the state and error to release it with (None: as it is).
        After a database error that may pass it runs again, resuming from its trials."""
        retry = DbRetry(self.db_retry_s)
        while True:
            try:
                self._tune_job(job, retry)
            except Exception as err:  # recorded on the job; the worker lives on
                outcome = self._after_error(job.id, err, retry)
                if outcome is None:
                    continue
                return outcome
            if self._stop_reason(job.id) in HAND_OVER:
                return None, None
            return "done", None

    def _tune_job(self, job: JobRecord, retry: DbRetry) -> None:
        """Tune the job to its end on the shared executor of its target and options."""
        workload = Workload.from_json(job.workload_key)
        target = Target(job.target_key)
        opts = JobOptions.from_row(job.tuner, job.trials, job.options)

        def on_batch(progress: "Progress") -> Optional[bool]:
            retry.recorded()
            self.notifier.publish(job.id)
            return False if self._stop_reason(job.id) else None

        with self.executors.use(target, opts.measure) as executor:
            # the job's view: it says why the job waits (a Ray executor), and gives the
            # batch in flight up once the job must stop
            executor = executor.for_job(
                job_id=job.id, on_wait=lambda reason: self._on_wait(job.id, reason),
                should_stop=lambda: self._stop_reason(job.id) is not None)
            self._tune(workload, target, trials=opts.trials, tuner=opts.tuner, db=self.db,
                       early_stopping=opts.early_stopping, seed=opts.seed,
                       batch_size=opts.batch_size, callbacks=[on_batch], job_id=job.id,
                       owner=self.owner, transfer=opts.transfer, executor=executor,
                       tuner_options=dict(opts.tuner_options))

    def _after_error(self, job_id: int, err: Exception, retry: DbRetry) -> Outcome | None:
        """What the job's run raising ``err`` means: the state and error to release the
        job with, or None to run it again (after a backoff)."""
        reason = self._stop_reason(job_id)
        kind = classify(err, reason)
        if kind is ErrorKind.LEASE_LOST:
            log.warning("job %d: %s; stopped here", job_id, err)
        elif kind is ErrorKind.HANDED_OVER:
            # Shutting down closed the executor under the batch: not the job's fault.
            log.warning("job %d interrupted (%s); it resumes in the next claim", job_id,
                        reason)
        elif kind is ErrorKind.STOPPED:
            log.info("job %d stopped (%s): %s", job_id, reason, err)
        elif kind is ErrorKind.TRANSIENT:
            delay = retry.next_delay()
            if delay is None:
                log.error("job %d failed: database errors for %.0f s:\n%s", job_id,
                          self.db_retry_s, traceback.format_exc())
                return "failed", retry.give_up(err)
            log.warning("job %d: database error (%d in a row), resuming in %.1f s: %s: %s",
                        job_id, len(retry.errors), delay, type(err).__name__, err)
            # shutting down: the next claim resumes it
            return (None, None) if self._closed.wait(delay) else None
        else:
            log.error("job %d failed:\n%s", job_id, traceback.format_exc())
            return "failed", f"{type(err).__name__}: {err}"[:4000]
        return None, None
