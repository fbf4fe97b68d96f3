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
from pathlib import Path
from typing import Optional


def default_path() -> Path:
    """The lock file every autotune process of this host and user agrees on."""
    return Path(tempfile.gettempdir()) / f"autotune-host-cpu-{os.getuid()}.lock"


class HostLock:
    """A reusable, non-reentrant context manager holding the host's CPU lock."""

    def __init__(self, path: Optional[Path] = None) -> None:
        self.path = path or default_path()
        self._fd: Optional[int] = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
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
