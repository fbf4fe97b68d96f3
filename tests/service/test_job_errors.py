"""The job manager's error classifier and database retry policy."""
from __future__ import annotations

import sqlalchemy.exc as sa_exc

from autotune.db.lease import LeaseLost
from autotune.service.job_errors import DbRetry, ErrorKind, backoff_s, classify


def _locked() -> sa_exc.OperationalError:
    return sa_exc.OperationalError("UPDATE jobs", {}, Exception("database is locked"))


def test_classify_names_each_way_a_run_ends() -> None:
    assert classify(LeaseLost("taken over"), None) is ErrorKind.LEASE_LOST
    assert classify(LeaseLost("taken over"), "shutdown") is ErrorKind.LEASE_LOST
    for reason in ("shutdown", "lost", "expired"):
        assert classify(RuntimeError("executor closed"), reason) is ErrorKind.HANDED_OVER
    assert classify(RuntimeError("waiting"), "cancelled") is ErrorKind.STOPPED
    assert classify(_locked(), None) is ErrorKind.TRANSIENT
    try:  # a database error under another one is still the database's
        raise RuntimeError("recording a batch") from _locked()
    except RuntimeError as wrapped:
        assert classify(wrapped, None) is ErrorKind.TRANSIENT
    assert classify(sa_exc.IntegrityError("INSERT", {}, Exception("unique")), None) \
        is ErrorKind.FAILED
    assert classify(ValueError("bad workload"), None) is ErrorKind.FAILED


def test_db_retry_backs_off_within_its_window_and_restarts_after_a_batch() -> None:
    assert [backoff_s(n) for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff_s(100) == 30.0
    retry = DbRetry(window_s=60.0)
    assert [retry.next_delay() for _ in range(3)] == [0.5, 1.0, 2.0]
    retry.recorded()
    assert retry.next_delay() == 0.5
    closed = DbRetry(window_s=0.0)  # no window: the first error already gives up
    assert closed.next_delay() is None
    assert closed.give_up(_locked()).startswith("database error, still failing after 1 tries")
