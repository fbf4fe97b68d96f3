"""`DatabaseProbe`: whether the database answers, checked from a thread of its own.

`/health` answers from the probe's last reading, in the event loop: it never waits for a
request thread or a pooled connection behind busy requests (a thread hop under load costs
tens of milliseconds of waiting for the interpreter), and a stale reading counts as down.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from autotune.db import Database


@dataclass(frozen=True)
class Reading:
    revision: Optional[str]  # the schema revision, when the database answered
    error: Optional[str]     # why it did not ("OperationalError"), else None
    at: float                # time.monotonic() of the reading


class DatabaseProbe:
    """Reads ``db.revision()`` every ``every_s`` seconds until `close`."""

    def __init__(self, db: "Database", every_s: float = 1.0) -> None:
        self.db, self.every_s = db, every_s
        self.reading = self._read()  # one at once: /health is right from the start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="autotune-db-probe",
                                        daemon=True)
        self._thread.start()

    def _read(self) -> Reading:
        try:
            return Reading(self.db.revision(), None, time.monotonic())
        except Exception as err:  # any driver error means "down", never a crash
            return Reading(None, type(err).__name__, time.monotonic())

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.reading = self._read()

    def problem(self, stale_s: float = 10.0) -> Optional[str]:
        """Why the database counts as down (an error, or no reading for ``stale_s``)."""
        reading = self.reading
        age = time.monotonic() - reading.at
        if age > stale_s:
            return f"no answer from the database for {age:.0f} s"
        return None if reading.error is None else f"database unreachable: {reading.error}"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
