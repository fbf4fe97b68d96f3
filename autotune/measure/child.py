"""`ChildProcess`: one spawned worker on a duplex pipe that can be killed and respawned.

Builders and runners both keep such children warm (a spawn costs an interpreter start
and the imports) and replace one whenever it hangs or dies; nothing else is shared.
"""
from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator

_JOIN_S = 2.0  # how long a dying child gets to leave before it is killed
ORPHAN_POLL_S = 0.5  # how often a child checks that its parent still lives


class ChildTimeout(Exception):
    """No message arrived before the deadline (the child may be hung)."""


class ChildDied(Exception):
    """The child's end of the pipe closed: it exited or was killed by a signal."""


class ChildProcess:
    """A spawned process running ``main(conn, *args)``; ``conn`` is its end of the pipe."""

    def __init__(self, main: Callable[..., None], args: tuple[Any, ...], name: str) -> None:
        self._main, self._args, self.name = main, args, name
        self.conn: Connection | None = None
        self._proc: multiprocessing.process.BaseProcess | None = None

    @property
    def started(self) -> bool:
        return self._proc is not None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Spawn the process (returns at once; the child says when it is ready)."""
        ctx = multiprocessing.get_context("spawn")  # fork would copy our threads and JIT state
        parent, child = ctx.Pipe(duplex=True)
        proc = ctx.Process(target=_bootstrap, args=(os.getpid(), self._main, child, *self._args),
                           name=self.name, daemon=True)
        proc.start()
        child.close()  # so that the child's death shows up here as EOF
        self.conn, self._proc = parent, proc

    def send(self, msg: Any) -> bool:
        """Send ``msg``; False when the child is gone."""
        if self.conn is None:
            return False
        try:
            self.conn.send(msg)
            return True
        except (OSError, ValueError):
            return False

    def recv(self, timeout: float) -> Any:
        """The next message; raises ChildTimeout or ChildDied."""
        if self.conn is None:
            raise ChildDied("not started")
        try:
            if not self.conn.poll(max(timeout, 0.0)):
                raise ChildTimeout(f"no answer within {timeout:g} s")
            return self.conn.recv()
        except (EOFError, OSError):
            raise ChildDied(self.exit_reason()) from None

    def exit_reason(self) -> str:
        """'signal N' or 'exit code N' of a child whose pipe has closed."""
        if self._proc is None:
            return "not started"
        self._proc.join(_JOIN_S)
        code = self._proc.exitcode
        if code is None:
            self.kill()
            return "closed its pipe and was killed"
        if code < 0:
            return f"signal {-code}"
        return f"exit code {code}"

    def kill(self) -> None:
        """Kill the process now and forget it (a no-op when not started)."""
        proc, conn = self._proc, self.conn
        self._proc, self.conn = None, None
        if proc is not None:
            if proc.is_alive():
                proc.kill()
            proc.join(_JOIN_S)
        if conn is not None:
            conn.close()

    def restart(self) -> None:
        """Kill and spawn a fresh process."""
        self.kill()
        self.start()

    def stop(self) -> None:
        """Ask the child to leave (a ``None`` message), then kill it if it lingers."""
        proc = self._proc
        if proc is not None and self.send(None):
            proc.join(_JOIN_S)
        self.kill()


def _bootstrap(parent: int, main: Callable[..., None], *args: Any) -> None:
    """Child entry: die with the parent, then run ``main``. ``daemon`` reaps children only on
    a clean exit; a SIGKILLed parent (a Ray actor lost with its node) would leave them."""
    threading.Thread(target=_exit_with_parent, args=(parent,), name="autotune-orphan-watch",
                     daemon=True).start()
    main(*args)


def _exit_with_parent(parent: int) -> None:
    # Polled, not prctl(PR_SET_PDEATHSIG): that fires when the spawning *thread* ends, and
    # children are respawned from short-lived threads (the GPU build feed).
    while os.getppid() == parent:
        time.sleep(ORPHAN_POLL_S)
    os._exit(1)


def child_setup() -> None:
    """Called first in every child: no core files from crashing kernels, SIGINT ignored."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Ctrl-C in a terminal reaches the whole process group; the parent stops its children.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def tasks(conn: Connection) -> Iterator[Any]:
    """The child's side of the pipe: say ready, then each task until the parent sends
    ``None`` or goes away."""
    conn.send(("ready", os.getpid()))
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        yield task
