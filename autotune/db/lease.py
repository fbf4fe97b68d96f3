"""Owners of jobs and `LeaseKeeper`, which keeps an owner's leases on its running jobs alive.

A process that runs jobs (the service's job manager, the library's `tune`) holds each under
an owner id and renews the lease from a daemon thread, which also reads every second whether
a held job was cancelled. While it measures and after each batch the runner asks
`LeaseKeeper.stopping`: the job may have been cancelled (by any process, since cancelling
only writes the database), taken over by another owner, or left unrenewed past its lease.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence

from autotune.db.schema import TERMINAL_STATES
from autotune.db.values import ConfigLike, RetimedLike, TargetLike, WorkloadLike
from autotune.measure.result import MeasureResult
from autotune.records import TrialRecord
from autotune.search.store import JobStopped, TrialStore

if TYPE_CHECKING:
    from autotune.db.database import Database

log = logging.getLogger("autotune.db")

# How often a keeper reads whether its jobs were cancelled, between renewals (seconds).
STATE_POLL_S = 1.0


class LeaseLost(RuntimeError):
    """Another process holds the job now: what this one measured for it is not written."""


class JobEnded(LeaseLost, JobStopped):
    """The job has ended (cancelled) under its owner: nothing more is written for it."""


def new_owner() -> str:
    """A new owner id of this process: ``host:pid:token`` (the token tells owners in one
    process apart)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def is_dead_local(owner: str) -> bool:
    """Whether ``owner`` names a process of this host that no longer exists."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname():
        return False
    try:
        pid = int(parts[1])
    except ValueError:
        return False
    if not 0 < pid < 2**31:  # 0 and negative pids name process groups
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # it exists, as another user's process
        pass
    return False


@dataclass
class _Held:
    expires: float  # monotonic time by which the lease has surely run out unless renewed
    reason: Optional[str] = None  # why the job must stop, once known


class LeaseKeeper:
    """Renews ``owner``'s leases of the jobs added to it every ``lease_s / 3`` seconds."""

    def __init__(self, db: "Database", owner: str, lease_s: float) -> None:
        self.db, self.owner, self.lease_s = db, owner, lease_s
        self._lock = threading.Lock()
        self._held: dict[int, _Held] = {}
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def add(self, job_id: int) -> None:
        """Keep the lease of ``job_id``, just claimed (so valid for ``lease_s`` from now)."""
        with self._lock:
            self._held[job_id] = _Held(time.monotonic() + self.lease_s)

    def discard(self, job_id: int) -> None:
        """Stop renewing ``job_id`` (call before releasing it)."""
        with self._lock:
            self._held.pop(job_id, None)

    def stopping(self, job_id: int) -> Optional[str]:
        """Why a held job must stop: the state it ended in (``cancelled``), ``lost`` (another
        owner took it over) or ``expired`` (not renewed in time); None to go on."""
        with self._lock:
            held = self._held.get(job_id)
            if held is None or held.reason is not None:
                return None if held is None else held.reason
            return "expired" if time.monotonic() >= held.expires else None

    def start(self) -> "LeaseKeeper":
        """Renew from a daemon thread until `stop`."""
        self._thread = threading.Thread(target=self._loop, name="autotune-lease", daemon=True)
        self._thread.start()
        return self

    def running(self) -> bool:
        """Whether the renewing thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop renewing (the leases run out unless their jobs are released)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        # Renew every third of the lease; between renewals, read whether a held job was
        # cancelled (or taken over), so that it stops within a second of it.
        renew_s = self.lease_s / 3
        due = time.monotonic() + renew_s
        while not self._stop.wait(min(STATE_POLL_S, max(due - time.monotonic(), 0.0))):
            if time.monotonic() >= due:
                self.renew()
                due = time.monotonic() + renew_s
            else:
                self.check()

    def check(self) -> None:
        """One read: note the held jobs that ended or went to another owner."""
        with self._lock:
            job_ids = [i for i, held in self._held.items() if held.reason is None]
        if not job_ids:
            return
        try:
            found = self.db.job_holders(job_ids)
        except Exception:  # the renewals report an unreachable database
            return
        with self._lock:
            for job_id in job_ids:
                held, (state, owner) = self._held.get(job_id), found.get(job_id, ("", None))
                if held is None or held.reason is not None:
                    continue
                if owner != self.owner:
                    held.reason = "lost"
                elif state in TERMINAL_STATES:
                    held.reason = state

    def renew(self) -> None:
        """One round: extend every held lease and note which jobs must stop."""
        with self._lock:
            job_ids = list(self._held)
        if not job_ids:
            return
        started = time.monotonic()  # the new lease runs from no earlier than this
        try:
            found = self.db.renew_leases(self.owner, job_ids, self.lease_s)
        except Exception as err:  # the database is unreachable: keep trying; stopping() expires
            log.warning("renewing the leases of jobs %s failed: %s: %s", job_ids,
                        type(err).__name__, err)
            return
        with self._lock:
            for job_id in job_ids:
                held, job = self._held.get(job_id), found.get(job_id)
                if held is None or held.reason is not None:
                    continue  # discarded meanwhile, or already told to stop
                if job is None or job.owner != self.owner:
                    held.reason = "lost"
                elif job.state in TERMINAL_STATES:
                    held.reason = job.state
                else:
                    held.expires = started + self.lease_s


class OwnedStore(TrialStore):
    """The database as the owner of one job writes to it: each write for the job checks, in
    its own transaction, that ``owner`` still holds the job, else raises `LeaseLost`.

    This fences a process that lost its lease without knowing (suspended, cut off from the
    database) from writing beside the job's new owner. Reads go to the database.
    """

    def __init__(self, db: "Database", job_id: int, owner: str) -> None:
        self.db, self.lease = db, (job_id, owner)

    def trials_for(self, workload: WorkloadLike, target: TargetLike) -> list[TrialRecord]:
        return list(self.db.trials_for(workload, target))

    def history(self, op: str, target_kind: str,
                exclude_workload_key: Optional[str] = None) -> dict[str, list[TrialRecord]]:
        return dict(self.db.history(op, target_kind, exclude_workload_key))

    def best(self, workload: WorkloadLike, target: TargetLike) -> Optional[TrialRecord]:
        return self.db.best(workload, target)

    def add_trials(self, workload: WorkloadLike, target: TargetLike, job_id: Optional[int],
                   items: Sequence[tuple[ConfigLike, MeasureResult]], flops: int) -> int:
        return self.db.add_trials(workload, target, job_id, items, flops, lease=self.lease)

    def update_job_progress(self, job_id: int, *, trials_done: int,
                            best_gflops: Optional[float]) -> bool:
        return self.db.update_job_progress(job_id, trials_done=trials_done,
                                           best_gflops=best_gflops, lease=self.lease)

    def record_retiming(self, workload: WorkloadLike, target: TargetLike,
                        members: Sequence[RetimedLike], *, accepted: bool) -> int:
        return self.db.record_retiming(workload, target, members, accepted=accepted,
                                       lease=self.lease)

    def set_job_model_scores(self, job_id: int, *, batch: int, trials: int,
                             scores: Mapping[str, float]) -> bool:
        return self.db.set_job_model_scores(job_id, batch=batch, trials=trials, scores=scores,
                                            lease=self.lease)


# Releases a held job: (job id, final state or None to leave it as it is, error).
Releaser = Callable[[int, Optional[str], Optional[str]], None]


class HeldJob:
    """A job this process holds under ``keeper``'s lease: the store its trials are written
    through (fenced by the owner), whether it must stop, and how it ends (`end`)."""

    def __init__(self, keeper: LeaseKeeper, job_id: int) -> None:
        self.keeper, self.job_id = keeper, job_id
        self.store = OwnedStore(keeper.db, job_id, keeper.owner)
        self.outcome: tuple[Optional[str], Optional[str]] = (None, None)

    def stopping(self) -> Optional[str]:
        """Why the job must stop (`LeaseKeeper.stopping`); None to go on."""
        return self.keeper.stopping(self.job_id)

    def callback(self, progress: Any) -> Optional[bool]:
        """A loop callback: False (stop now) once the job must stop."""
        return False if self.stopping() else None

    def end(self, state: Optional[str], error: Optional[str] = None) -> None:
        """The state (and error) to release the job in when the hold ends (None: as it is)."""
        self.outcome = (state, error)


@contextmanager
def held_job(keeper: LeaseKeeper, job_id: int, *,
             release: Optional[Releaser] = None) -> Iterator[HeldJob]:
    """Hold ``job_id`` (claimed or created by ``keeper.owner``) for the block: its lease
    renewed by ``keeper``, released when the block ends in the state `HeldJob.end` set, or
    ``failed`` with the error (``cancelled`` on KeyboardInterrupt) when the block raises.
    ``release`` releases it (default: `Database.release_job`, leaving a job whose lease was
    lost or expired as it is, for the process that resumes it). The library, the service's
    job manager and a model run's task jobs all hold their jobs so."""
    keeper.add(job_id)
    held = HeldJob(keeper, job_id)
    try:
        yield held
    except KeyboardInterrupt:
        held.end("cancelled")
        raise
    except LeaseLost:
        held.end(None)  # another owner runs it now: leave it alone
        raise
    except Exception as exc:
        held.end("failed", f"{type(exc).__name__}: {exc}"[:4000])
        raise
    finally:
        reason = keeper.stopping(job_id)
        keeper.discard(job_id)  # off the keeper first: it must not read the release as lost
        state, error = held.outcome
        if release is not None:
            release(job_id, state, error)
        else:
            if reason in ("lost", "expired"):
                state, error = None, None
            keeper.db.release_job(job_id, keeper.owner, state=state, error=error)
