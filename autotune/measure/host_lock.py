"""`HostLock`: this host's CPU, held across processes while a kernel is timed on it.

One process's threading lock cannot keep another process (a second service, an `autotune
tune` run, a Ray measurement worker on the same host) from computing while it times. An
advisory ``flock`` on a per-host file does: timing holds it, and so does host-side search
of a job whose kernels are timed on this CPU. Locks of separate ``open`` calls conflict
even within one process, so every holder opens its own descriptor.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
import threading
from pathlib import Path
from typing import Optional

from autotune.measure.result import STOP_POLL_S, MeasureStopped, ShouldStop


def default_path() -> Path:
    """The lock file every autotune process of this host and user agrees on."""
    return Path(tempfile.gettempdir()) / f"autotune-host-cpu-{os.getuid()}.lock"


class HostLock:
    """A reusable, non-reentrant context manager holding the host's CPU lock."""

    def __init__(self, path: Optional[Path] = None) -> None:
        self.path = path or default_path()
        self._fd: Optional[int] = None

    def acquire(self, should_stop: ShouldStop = None) -> None:
        """Wait for the lock; with ``should_stop``, give up (`MeasureStopped`) once it says so.

        The wait is the kernel's (in its turn among the other waiters, never polling past
        them), in a thread; given up, that thread lets the lock go as soon as it has it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        if should_stop is None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            return
        lock = threading.Lock()  # orders the hand-over against giving up
        taken, failed, given_up = threading.Event(), [], [False]

        def take() -> None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as err:
                failed.append(err)
            with lock:
                taken.set()
                if given_up[0]:
                    os.close(fd)

        threading.Thread(target=take, name="autotune-host-lock", daemon=True).start()
        while not taken.wait(STOP_POLL_S):
            with lock:
                if not taken.is_set() and should_stop():
                    given_up[0] = True
                    raise MeasureStopped("the job must stop: waiting for the host's CPU "
                                         "given up")
        if failed:
            os.close(fd)
            raise failed[0]
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor drops the lock

    def __enter__(self) -> "HostLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
