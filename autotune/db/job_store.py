"""`JobStore`: tuning jobs, their leases, their cost models' scores and workers, and the
service's API keys; model runs are its part in `autotune.db.model_runs`."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Mapping, Optional, Sequence

from autotune.db import apikeys, jobs, trials
from autotune.db.model_runs import ModelRunStore
from autotune.db.values import (
    ApiKeyRecord,
    JobRecord,
    TargetLike,
    WorkloadLike,
)


class JobStore(ModelRunStore):
    """Jobs and who holds them, the model runs they belong to, and the keys allowed to write
    them."""

    def create_job(self, *, workload: WorkloadLike, target: TargetLike, tuner: str, trials: int,
                   options: Optional[Mapping[str, Any]] = None, owner: Optional[str] = None,
                   lease_s: Optional[float] = None) -> JobRecord:
        """Insert a queued job; with ``owner``, one already running, claimed for ``lease_s``."""
        with self.session(write=True) as s:
            ids = self._ids(s, workload, target)
            job_id = jobs.create_job(s, workload_id=ids[0], target_id=ids[1], tuner=tuner,
                                     trials=trials, options=options or {}, owner=owner,
                                     lease_s=lease_s)
            record = jobs.get_job(s, job_id=job_id)
        self._remember(workload, target, ids)
        assert record is not None
        return record

    def get_job(self, job_id: int) -> Optional[JobRecord]:
        """The job with ``job_id``, or None."""
        with self.session() as s:
            return jobs.get_job(s, job_id=job_id)

    def list_jobs(self, *, state: Optional[str] = None, offset: int = 0,
                  limit: int = 50) -> tuple[list[JobRecord], int]:
        """A page of jobs, newest first, and the total count."""
        with self.session() as s:
            return jobs.list_jobs(s, state=state, offset=offset, limit=limit)

    def set_job_state(self, job_id: int, state: str, *, error: Optional[str] = None,
                      from_states: Optional[Sequence[str]] = None) -> Optional[JobRecord]:
        """Move a job to ``state`` (only from ``from_states`` when given).

        Returns the updated job, or None when it does not exist or the transition did not apply.
        """
        with self.session(write=True) as s:
            if not jobs.set_job_state(s, job_id=job_id, state=state, error=error,
                                      from_states=from_states):
                return None
            return jobs.get_job(s, job_id=job_id)

    def update_job_progress(self, job_id: int, *, trials_done: int,
                            best_gflops: Optional[float],
                            lease: Optional[tuple[int, str]] = None) -> bool:
        """Record a job's trial count and best GFLOP/s so far; False when it does not exist.
        ``lease`` as in `add_trials`."""
        with self.session(write=True) as s:
            jobs.check_held(s, lease)
            return jobs.update_job_progress(s, job_id=job_id, trials_done=trials_done,
                                            best_gflops=best_gflops)

    def set_job_model_scores(self, job_id: int, *, batch: int, trials: int,
                             scores: Mapping[str, float],
                             lease: Optional[tuple[int, str]] = None) -> bool:
        """Replace the scores the job's current cost model gives its valid trials, by
        ``config_key`` (the config index in decimal): the model fit after the batch that
        started after ``batch`` of the job's trials, with ``trials`` measured by then.
        False when the job does not exist. ``lease`` as in `add_trials`."""
        with self.session(write=True) as s:
            jobs.check_held(s, lease)
            return jobs.set_model_scores(s, job_id=job_id, batch=batch, trials=trials,
                                         scores=scores)

    def job_model_scores(self, job_id: int) -> Optional[dict[str, Any]]:
        """``{"batch", "trials", "scores": {config_key: score}}`` of the job's current cost
        model (`set_job_model_scores`), or None (no model, or no such job)."""
        with self.session() as s:
            return jobs.model_scores(s, job_id=job_id)

    def jobs_in_state(self, *states: str) -> list[JobRecord]:
        """Jobs in any of ``states``, oldest first."""
        with self.session() as s:
            return jobs.jobs_in_state(s, states=states)

    def job_workers(self, job_id: int) -> list[tuple[str, int, int]]:
        """(worker, trials, failed trials) of a job per measuring worker; "" for records
        that name none."""
        with self.session() as s:
            return trials.job_workers(s, job_id=job_id)

    def worker_counts(self, workers: Sequence[tuple[str, str]]
                      ) -> dict[tuple[str, str], tuple[int, int]]:
        """(trials, failed trials) recorded per (worker, target key), over all jobs."""
        with self.session() as s:
            return trials.worker_counts(s, workers=workers)

    # -- job leases ---------------------------------------------------------------------

    def claim_job(self, owner: str, lease_s: float, *,
                  now: Optional[datetime] = None) -> Optional[JobRecord]:
        """Take the oldest job nobody runs (unowned, lease expired, or owner a dead process
        of this host) for ``owner``: running, leased for ``lease_s``. None when there is none."""
        with self.session(write=True) as s:
            job_id = jobs.claim_job(s, owner=owner, lease_s=lease_s, now=jobs.as_utc(now))
            return None if job_id is None else jobs.get_job(s, job_id=job_id)

    def renew_leases(self, owner: str, job_ids: Sequence[int], lease_s: float, *,
                     now: Optional[datetime] = None) -> dict[int, JobRecord]:
        """Extend the leases ``owner`` still holds among ``job_ids`` by ``lease_s``; returns
        every asked job that exists, so the caller sees cancels and lost ownership."""
        with self.session(write=True) as s:
            jobs.renew_leases(s, owner=owner, job_ids=job_ids, lease_s=lease_s,
                              now=jobs.as_utc(now))
            return jobs.jobs_by_id(s, job_ids=job_ids)

    def job_holders(self, job_ids: Sequence[int]) -> dict[int, tuple[str, Optional[str]]]:
        """(state, owner) of each asked job that exists (read only: a cancel shows here
        between lease renewals)."""
        with self.session() as s:
            return jobs.holders(s, job_ids=job_ids)

    def release_job(self, job_id: int, owner: str, *, state: Optional[str] = None,
                    error: Optional[str] = None) -> Optional[JobRecord]:
        """Give up ``owner``'s hold on a job, moving it to ``state`` unless it has ended.

        Returns the job, or None when ``owner`` did not hold it (then nothing changes).
        """
        with self.session(write=True) as s:
            if not jobs.release_job(s, job_id=job_id, owner=owner, state=state, error=error):
                return None
            return jobs.get_job(s, job_id=job_id)

    def set_job_waiting(self, job_id: int, owner: str,
                        reason: Optional[str]) -> Optional[JobRecord]:
        """Show why a job ``owner`` holds waits (queued), or with None that it runs again.

        Returns the job, or None when ``owner`` does not hold it.
        """
        with self.session(write=True) as s:
            if not jobs.set_job_waiting(s, job_id=job_id, owner=owner, reason=reason):
                return None
            return jobs.get_job(s, job_id=job_id)

    # -- API keys -----------------------------------------------------------------------

    def create_api_key(self, name: str) -> str:
        """A new random key (``at_...``); only its hash is stored, so show it to the user now."""
        with self.session(write=True) as s:
            return apikeys.create_api_key(s, name=name)

    def verify_api_key(self, key: str) -> bool:
        """Whether ``key`` is a stored, unrevoked key."""
        with self.session() as s:
            return apikeys.verify_api_key(s, key=key)

    def list_api_keys(self) -> list[ApiKeyRecord]:
        """All keys with their names and display prefixes (never the keys)."""
        with self.session() as s:
            return apikeys.list_api_keys(s)

    def revoke_api_key(self, prefix: str) -> int:
        """Revoke the active key with display ``prefix`` (or the whole key); returns how many
        were revoked (0 or 1). `AmbiguousKeyPrefix` when the prefix names several."""
        with self.session(write=True) as s:
            return apikeys.revoke_api_key(s, prefix=prefix)

