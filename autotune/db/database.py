"""``Database``: one engine and its sessions, with the tuning records' operations as methods."""
from __future__ import annotations

from contextlib import contextmanager
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence

from sqlalchemy.orm import Session, sessionmaker

from autotune.db import apikeys, export_import, jobs, migrate, trials
from autotune.db.engine import make_engine, normalize_url
from autotune.db.entities import ensure_target, ensure_workload
from autotune.db.records import (
    ApiKeyRecord,
    ConfigLike,
    JobRecord,
    KeyOrObject,
    RetimedLike,
    TargetLike,
    TrialRecord,
    WorkloadLike,
    key_of,
)
from autotune.records import files as jsonl_files
from autotune.settings import Settings

if TYPE_CHECKING:
    from autotune.measure.result import MeasureResult


class Database:
    """A tuning database at ``url`` (default: ``Settings().db_url``, read at construction;
    a SQLite file unless set; ``postgresql+psycopg://`` at scale).

    Constructing connects lazily and changes nothing; ``upgrade()`` (or ``Database.open``)
    brings the schema to the newest migration.
    """

    def __init__(self, url: Optional[str] = None) -> None:
        self.url = normalize_url(Settings().db_url if url is None else url)
        self.engine = make_engine(self.url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        # Writers take SQLite's write lock when they begin: a deferred transaction that reads
        # and then writes fails at once ("database is locked") if another connection
        # committed in between, whatever the busy timeout. PostgreSQL ignores the option.
        self._write_sessions = sessionmaker(
            self.engine.execution_options(sqlite_begin="IMMEDIATE"), expire_on_commit=False)
        # Committed (key -> id) rows; ids never change, so the cache is never stale.
        self._workload_ids: dict[str, int] = {}
        self._target_ids: dict[str, int] = {}

    @classmethod
    def open(cls, url: Optional[str] = None) -> "Database":
        """Connect and migrate to head (idempotent; safe from concurrent processes)."""
        db = cls(url)
        db.upgrade()
        return db

    def upgrade(self, revision: str = "head") -> None:
        """Run the Alembic migrations up to ``revision``."""
        migrate.upgrade(self.engine, revision)

    def revision(self) -> Optional[str]:
        """The schema revision the database is at (None: not migrated)."""
        return migrate.current_revision(self.engine)

    @contextmanager
    def session(self, *, write: bool = False) -> Iterator[Session]:
        """A session in one transaction: committed on success, rolled back on error.
        ``write=True`` for transactions that write (they queue for the lock on SQLite)."""
        maker = self._write_sessions if write else self._sessions
        with maker() as session, session.begin():
            yield session

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Database({self.engine.url.render_as_string(hide_password=True)!r})"

    # -- trials -------------------------------------------------------------------------

    def _ids(self, session: Session, workload: WorkloadLike, target: TargetLike) -> tuple[int, int]:
        wid = self._workload_ids.get(workload.key)
        if wid is None:
            wid = ensure_workload(session, key=workload.key, op=workload.op)
        tid = self._target_ids.get(target.key)
        if tid is None:
            tid = ensure_target(session, key=target.key, kind=target.kind)
        return wid, tid

    def _remember(self, workload: WorkloadLike, target: TargetLike, ids: tuple[int, int]) -> None:
        # Called after commit only: an id from a rolled-back insert must not be cached.
        self._workload_ids[workload.key], self._target_ids[target.key] = ids

    def add_trials(self, workload: WorkloadLike, target: TargetLike, job_id: Optional[int],
                   items: Sequence[tuple[ConfigLike, "MeasureResult"]], flops: int, *,
                   lease: Optional[tuple[int, str]] = None) -> int:
        """Record measurements in one transaction, skipping configs already recorded; returns
        count. With ``lease`` (job id, owner), only while that owner holds the job (else
        `LeaseLost`, nothing written)."""
        with self.session(write=True) as s:
            jobs.check_held(s, lease)
            ids = self._ids(s, workload, target)
            rows = [trials.trial_row(workload_id=ids[0], target_id=ids[1], job_id=job_id,
                                     config=config, result=result, flops=flops)
                    for config, result in items]
            inserted = trials.insert_rows(s, rows=rows)
        self._remember(workload, target, ids)
        return inserted

    def record_retiming(self, workload: KeyOrObject, target: KeyOrObject,
                        members: Sequence[RetimedLike], *, accepted: bool,
                        lease: Optional[tuple[int, str]] = None) -> int:
        """Write a re-timing window's outcome (`trials.record_retiming`): an ``accepted``
        window's figures become the ones `best` ranks by; a disqualified member stops being
        valid. Returns the records touched. ``lease`` as in `add_trials`."""
        with self.session(write=True) as s:
            jobs.check_held(s, lease)
            return trials.record_retiming(s, workload_key=key_of(workload),
                                          target_key=key_of(target), members=members,
                                          accepted=accepted)

    def best(self, workload: KeyOrObject, target: KeyOrObject) -> Optional[TrialRecord]:
        """The best valid record (the first of `top`), or None; its figure is
        ``ranked_cost``. Failed trials are never best."""
        found = self.top(workload, target, 1)
        return found[0] if found else None

    def top(self, workload: KeyOrObject, target: KeyOrObject, k: int) -> list[TrialRecord]:
        """The ``k`` best valid records, best first (`trials.top` states the ranking)."""
        with self.session() as s:
            return trials.top(s, workload_key=key_of(workload), target_key=key_of(target), k=k)

    def measured_indices(self, workload: KeyOrObject, target: KeyOrObject) -> set[int]:
        """Space indices already measured for a workload on a target."""
        with self.session() as s:
            return trials.measured_indices(s, workload_key=key_of(workload),
                                           target_key=key_of(target))

    def trials_for(self, workload: KeyOrObject, target: KeyOrObject) -> list[TrialRecord]:
        """Every record of a workload on a target, in measurement order."""
        with self.session() as s:
            return trials.trials_for(s, workload_key=key_of(workload), target_key=key_of(target))

    def history(self, op: str, target_kind: str,
                exclude_workload_key: Optional[str] = None) -> dict[str, list[TrialRecord]]:
        """Records of other workloads of ``op`` on ``target_kind`` targets (transfer learning)."""
        with self.session() as s:
            return trials.history(s, op=op, target_kind=target_kind,
                                  exclude_workload_key=exclude_workload_key)

    def job_trials(self, job_id: int, *, offset: int = 0, limit: int = 100, sort: str = "id",
                   error: Optional[str] = None) -> tuple[list[TrialRecord], int]:
        """A page of a job's records (sort: [-]id, [-]gflops, [-]cost) and the total count."""
        with self.session() as s:
            return trials.job_trials(s, job_id=job_id, offset=offset, limit=limit, sort=sort,
                                     error=error)

    def job_trial_count(self, job_id: int) -> int:
        """How many records a job has written."""
        with self.session() as s:
            return trials.job_trial_count(s, job_id=job_id)

    def job_trials_since(self, job_id: int, after_id: int,
                         limit: Optional[int] = None) -> list[TrialRecord]:
        """A job's records newer than row ``after_id``, oldest first."""
        with self.session() as s:
            return trials.job_trials_since(s, job_id=job_id, after_id=after_id, limit=limit)

    # -- jobs ---------------------------------------------------------------------------

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

    # -- export / import ----------------------------------------------------------------

    def export_jsonl(self, fp: IO[str], *, workload: Optional[KeyOrObject] = None,
                     target: Optional[KeyOrObject] = None) -> int:
        """Write records as JSON lines to ``fp``; returns how many."""
        with self.session() as s:
            return export_import.export_jsonl(
                s, fp, workload_key=None if workload is None else key_of(workload),
                target_key=None if target is None else key_of(target))

    def import_jsonl(self, fp: IO[str]) -> int:
        """Insert JSON-line records from ``fp`` in one transaction, skipping duplicates."""
        with self.session(write=True) as s:
            return export_import.import_jsonl(s, fp)

    def export_jsonl_path(self, path: jsonl_files.PathLike, *,
                          workload: Optional[KeyOrObject] = None,
                          target: Optional[KeyOrObject] = None) -> int:
        """``export_jsonl`` to a file; gzip-compressed when the name ends in ``.gz``."""
        with jsonl_files.open_text(path, "w") as fp:
            return self.export_jsonl(fp, workload=workload, target=target)

    def import_jsonl_path(self, path: jsonl_files.PathLike) -> int:
        """``import_jsonl`` from a file, plain or gzip-compressed."""
        with jsonl_files.open_text(path, "r") as fp:
            return self.import_jsonl(fp)
