"""`JobManager`: a queue of persisted jobs run by a pool of worker threads.

Jobs live in the database; the queue only holds ids. On start, jobs left queued or running by
an earlier process are queued again and resume from their recorded trials (``tune`` with the
same ``job_id``). Cancelling marks the job cancelled at once and stops it after its current
batch. Threads suffice: building and timing happen in the executors' child processes.
"""
from __future__ import annotations

import logging
import queue
import threading
import traceback
from typing import TYPE_CHECKING, Any, Callable, Optional

from autotune.db import TERMINAL_STATES, Database, JobRecord
from autotune.service.executors import ExecutorPool
from autotune.service.notifier import Notifier

if TYPE_CHECKING:
    from autotune.search.result import Progress
    from autotune.service.validation import JobSpec

log = logging.getLogger("autotune.service")

TuneFn = Callable[..., Any]
_STOP = -1  # queue sentinel


def default_tune(*args: Any, **kwargs: Any) -> Any:
    from autotune.api import tune

    return tune(*args, **kwargs)


class JobManager:
    """Runs up to ``workers`` jobs at once, one shared executor per target (see executors)."""

    def __init__(self, db: Database, executors: ExecutorPool, *, workers: int,
                 notifier: Optional[Notifier] = None, tune_fn: TuneFn = default_tune) -> None:
        self.db, self.executors, self.workers = db, executors, workers
        self.notifier = notifier or Notifier()
        self._tune = tune_fn
        self._queue: "queue.Queue[int]" = queue.Queue()
        self._lock = threading.Lock()
        self._active: set[int] = set()      # jobs a worker is running now
        self._stop_jobs: set[int] = set()   # running jobs to stop after their batch
        self._threads: list[threading.Thread] = []
        self.closing = False

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> list[int]:
        """Re-queue the jobs an earlier process left unfinished, start the workers; their ids."""
        resumed = []
        for job in self.db.jobs_in_state("running", "queued"):
            if job.state == "running":
                self.db.set_job_state(job.id, "queued", from_states=["running"])
            self._queue.put(job.id)
            resumed.append(job.id)
        for i in range(self.workers):
            thread = threading.Thread(target=self._work, name=f"autotune-job-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        if resumed:
            log.info("picking up unfinished jobs %s", resumed)
        return resumed

    def close(self, timeout: float = 5.0) -> None:
        """Stop the running jobs after their batch (they stay 'running' and resume on the next
        start), stop the workers and the executors."""
        self.closing = True
        with self._lock:
            self._stop_jobs.update(self._active)
        for _ in self._threads:
            self._queue.put(_STOP)
        for thread in self._threads:
            thread.join(timeout)
        self.notifier.close()
        self.executors.close()

    # -- requests -------------------------------------------------------------------------

    def submit(self, spec: "JobSpec") -> JobRecord:
        """Persist a queued job and queue it."""
        job = self.db.create_job(workload=spec.workload, target=spec.target, tuner=spec.tuner,
                                 trials=spec.trials, options=spec.options)
        self._queue.put(job.id)
        self.notifier.publish(job.id)
        return job

    def cancel(self, job_id: int) -> Optional[JobRecord]:
        """Cancel a queued or running job (a running one stops after its current batch).

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
        """Whether a worker is still running the job (its last batch may be in flight)."""
        with self._lock:
            return job_id in self._active

    def queued(self) -> int:
        return self._queue.qsize()

    # -- workers --------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            job_id = self._queue.get()
            if job_id == _STOP or self.closing:
                return
            # A queued job is claimed by moving it to running; a cancelled one is skipped.
            job = self.db.set_job_state(job_id, "running", from_states=["queued"])
            if job is None:
                continue
            with self._lock:
                self._active.add(job_id)
            self.notifier.publish(job_id)
            try:
                self._run(job)
            finally:
                with self._lock:
                    self._active.discard(job_id)
                    self._stop_jobs.discard(job_id)
                self.notifier.publish(job_id)

    def _should_stop(self, job_id: int) -> bool:
        with self._lock:
            return job_id in self._stop_jobs

    def _run(self, job: JobRecord) -> None:
        from autotune.ops import Workload
        from autotune.target import Target

        def on_batch(progress: "Progress") -> Optional[bool]:
            self.notifier.publish(job.id)
            return False if self._should_stop(job.id) else None

        opts = job.options
        try:
            workload = Workload.from_json(job.workload_key)
            target = Target(job.target_key)
            self._tune(workload, target, trials=job.trials, tuner=job.tuner, db=self.db,
                       early_stopping=opts.get("early_stopping"), seed=int(opts.get("seed", 0)),
                       callbacks=[on_batch], job_id=job.id,
                       transfer=bool(opts.get("transfer", True)),
                       executor=self.executors.get(target),
                       tuner_options=dict(opts.get("tuner_options") or {}))
        except Exception as err:  # recorded on the job; the worker lives on
            if self.closing:
                # Shutting down closed the executor under the batch: not the job's fault.
                log.warning("job %d interrupted by shutdown; it resumes on the next start", job.id)
                return
            log.error("job %d failed:\n%s", job.id, traceback.format_exc())
            self.db.set_job_state(job.id, "failed", error=f"{type(err).__name__}: {err}"[:4000],
                                  from_states=["running"])
            return
        if self.closing and not self._cancelled(job.id):
            return  # stopped for shutdown: stays running, resumes on the next start
        self.db.set_job_state(job.id, "done", from_states=["running"])

    def _cancelled(self, job_id: int) -> bool:
        job = self.db.get_job(job_id)
        return job is None or job.state in TERMINAL_STATES
