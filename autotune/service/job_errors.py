"""What an error in a job's run means for the job, and how long database errors are retried:
the job manager's error classifier and retry policy, apart from its loop."""
from __future__ import annotations

import enum
import time
from typing import Optional

import sqlalchemy.exc as sa_exc

from autotune.db.lease import LeaseLost

# Reasons to stop after which a job is left as it is, for the next claim to resume.
HAND_OVER = frozenset({"shutdown", "lost", "expired"})


class ErrorKind(enum.Enum):
    """What a job's run raising means (see `classify`)."""

    LEASE_LOST = "lease_lost"    # another process runs the job now: leave it alone
    HANDED_OVER = "handed_over"  # shutting down (or the lease ran out) under the batch
    STOPPED = "stopped"          # cancelled while it waited for a device: it has ended
    TRANSIENT = "transient"      # a database error that may pass: resume the job
    FAILED = "failed"            # the job's own failure, recorded on it


def classify(err: BaseException, stop_reason: Optional[str]) -> ErrorKind:
    """The kind of ``err``, raised by a job's run while the job must stop for
    ``stop_reason`` (None: it need not)."""
    if isinstance(err, LeaseLost):
        return ErrorKind.LEASE_LOST
    if stop_reason in HAND_OVER:
        return ErrorKind.HANDED_OVER
    if stop_reason is not None:
        return ErrorKind.STOPPED
    if is_transient_db_error(err):
        return ErrorKind.TRANSIENT
    return ErrorKind.FAILED


def is_transient_db_error(err: BaseException) -> bool:
    """Whether ``err``, or an error it was raised from, is a database error that may pass: a
    lock held too long ("database is locked"), a lost connection, an exhausted pool."""
    seen: Optional[BaseException] = err
    for _ in range(8):  # a cause chain is short; never loop on a cycle
        if seen is None:
            return False
        if isinstance(seen, (sa_exc.OperationalError, sa_exc.InterfaceError,
                             sa_exc.TimeoutError)):
            return True
        if isinstance(seen, sa_exc.DBAPIError) and seen.connection_invalidated:
            return True
        seen = seen.__cause__
    return False


def backoff_s(attempt: int, cap: float = 30.0) -> float:
    """Seconds to wait before try ``attempt + 1``: 0.5, 1, 2, ... up to ``cap``."""
    return min(cap, 0.5 * 2.0 ** min(max(attempt - 1, 0), 16))


class DbRetry:
    """A job's database errors are retried, with backoff, while they have come for less
    than ``window_s`` since the first one after the job's last recorded batch."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self.errors: list[float] = []  # times of the database errors since the last batch

    def recorded(self) -> None:
        """A batch was recorded: the database works again."""
        self.errors.clear()

    def next_delay(self) -> Optional[float]:
        """Count an error; the seconds to wait before resuming, or None: give up."""
        self.errors.append(time.monotonic())
        if self.errors[-1] - self.errors[0] < self.window_s:
            return backoff_s(len(self.errors))
        return None

    def give_up(self, err: BaseException) -> str:
        """The job's error once its database errors outlasted the window."""
        return (f"database error, still failing after {len(self.errors)} tries over "
                f"{self.window_s:.0f} s: {type(err).__name__}: {err}")[:4000]
