"""`JobManager`: worker threads that claim persisted jobs from the database and run them.

Jobs live in the database only. Each worker thread claims the oldest job nobody runs (see
`Database.claim_job`) under this manager's owner id and runs it, resuming from its recorded
trials (``tune`` with the job's id), while a `LeaseKeeper` renews the leases of the jobs
running here. So several services (and `autotune tune` runs) can share one database: each job
runs in one process at a time, and the job of a process that died is taken over once its
lease runs out, or at once when that process was on this host. Cancelling only writes the
database; the process running the job stops it after its current batch. Threads suffice:
building and timing happen in the executors' child processes.
"""
from __future__ import annotations

import logging
import threading
import traceback
from typing import TYPE_CHECKING, Any, Callable, Optional

from autotune.db import Database, JobRecord
from autotune.db.lease import LeaseKeeper, LeaseLost, new_owner
from autotune.service.executors import ExecutorPool
from autotune.service.notifier import Notifier

if TYPE_CHECKING:
    from autotune.search.result import Progress
    from autotune.service.validation import JobSpec

log = logging.getLogger("autotune.service")

TuneFn = Callable[..., Any]
# Reasons to stop after which a job is left as it is, for the next claim to resume.
_HAND_OVER = frozenset({"shutdown", "lost", "expired"})


def default_tune(*args: Any, **kwargs: Any) -> Any:
    from autotune.api import tune

    return tune(*args, **kwargs)


class JobManager:
    """Runs up to ``workers`` jobs at once, one shared executor per target (see executors).

    ``lease_s``: how long a job's lease lasts unless renewed; ``poll_s``: how often an idle
    worker looks for jobs submitted elsewhere (a local submit wakes one at once).
    """

    def __init__(self, db: Database, executors: ExecutorPool, *, workers: int,
                 notifier: Optional[Notifier] = None, tune_fn: TuneFn = default_tune,
                 lease_s: float = 30.0, poll_s: float = 1.0) -> None:
        self.db, self.executors, self.workers = db, executors, workers
        self.lease_s, self.poll_s = lease_s, poll_s
        self.notifier = notifier or Notifier()
        self.owner = new_owner()
        self.leases = LeaseKeeper(db, self.owner, lease_s)
        self._tune = tune_fn
        self._wake = threading.Event()  # set by a local submit and by close
        self._lock = threading.Lock()
        self._active: set[int] = set()      # jobs a worker is running now
        self._stop_jobs: set[int] = set()   # running jobs cancelled here: stop after their batch
        self._threads: list[threading.Thread] = []
        self.closing = False

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the lease keeper and the workers."""
        self.leases.start()
        for i in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"autotune-job-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("running jobs as %s", self.owner)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the running jobs after their batch and release them (still 'running', so that
        another service, or this one restarted, takes them over at once); stop the executors."""
        self.closing = True
        self._wake.set()
        self._join(timeout)
        self.notifier.close()
        # Closing the executors ends a batch still in flight; its worker then releases the job.
        self.executors.close()
        self._join(timeout)
        self.leases.stop()

    def _join(self, timeout: float) -> None:
        for thread in self._threads:
            thread.join(timeout)

    # -- requests -------------------------------------------------------------------------

    def submit(self, spec: "JobSpec") -> JobRecord:
        """Persist a queued job and wake a worker to claim it."""
        job = self.db.create_job(workload=spec.workload, target=spec.target, tuner=spec.tuner,
                                 trials=spec.trials, options=spec.options)
        self._wake.set()
        self.notifier.publish(job.id)
        return job

    def cancel(self, job_id: int) -> Optional[JobRecord]:
        """Cancel a queued or running job; a running one stops after its current batch, here
        or, when another process runs it, once that process renews its lease.

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

    def _work(self) -> None:
        while not self.closing:
            self._wake.clear()  # before claiming: a submit from now on wakes the wait below
            try:
                job = self.db.claim_job(self.owner, self.lease_s)
            except Exception:  # the database may come back: log and keep polling
                log.error("claiming a job failed:\n%s", traceback.format_exc())
                job = None
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
        self.leases.add(job.id)
        self.notifier.publish(job.id)
        state, error = None, None
        try:
            state, error = self._run(job)
        finally:
            # Off the keeper first, so that it never reads the release as a lost lease.
            self.leases.discard(job.id)
            try:
                self.db.release_job(job.id, self.owner, state=state, error=error)
            except Exception:  # the lease runs out and another claim resumes the job
                log.error("job %d: releasing it failed:\n%s", job.id, traceback.format_exc())
            with self._lock:
                self._active.discard(job.id)
                self._stop_jobs.discard(job.id)
            self.notifier.publish(job.id)

    def _stop_reason(self, job_id: int) -> Optional[str]:
        """Why the job must stop after its batch ("shutdown", "cancelled", "lost", "expired")."""
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

    def _run(self, job: JobRecord) -> tuple[Optional[str], Optional[str]]:
        """Run a claimed job; the state and error to release it with (None: as it is)."""
        from autotune.ops import Workload
        from autotune.target import Target

        def on_batch(progress: "Progress") -> Optional[bool]:
            self.notifier.publish(job.id)
            return False if self._stop_reason(job.id) else None

        opts = job.options
        try:
            workload = Workload.from_json(job.workload_key)
            target = Target(job.target_key)
            executor = self.executors.get(target)
            for_job = getattr(executor, "for_job", None)
            if for_job is not None:  # an executor that can say why the job waits
                executor = for_job(job_id=job.id,
                                   on_wait=lambda reason: self._on_wait(job.id, reason),
                                   should_stop=lambda: self._stop_reason(job.id) is not None)
            self._tune(workload, target, trials=job.trials, tuner=job.tuner, db=self.db,
                       early_stopping=opts.get("early_stopping"), seed=int(opts.get("seed", 0)),
                       callbacks=[on_batch], job_id=job.id, owner=self.owner,
                       transfer=bool(opts.get("transfer", True)), executor=executor,
                       tuner_options=dict(opts.get("tuner_options") or {}))
        except LeaseLost as err:  # another process runs it now: leave it alone
            log.warning("job %d: %s; stopped here", job.id, err)
            return None, None
        except Exception as err:  # recorded on the job; the worker lives on
            reason = self._stop_reason(job.id)
            if reason in _HAND_OVER:
                # Shutting down closed the executor under the batch: not the job's fault.
                log.warning("job %d interrupted (%s); it resumes in the next claim", job.id,
                            reason)
                return None, None
            if reason is not None:  # cancelled while it waited for a device: it has ended
                log.info("job %d stopped (%s): %s", job.id, reason, err)
                return None, None
            log.error("job %d failed:\n%s", job.id, traceback.format_exc())
            return "failed", f"{type(err).__name__}: {err}"[:4000]
        if self._stop_reason(job.id) in _HAND_OVER:
            return None, None
        return "done", None
