"""`ChildProcess`: one worker interpreter on a duplex socket that can be killed and respawned.

Builders, runners and feature workers keep such children warm (a start costs an interpreter
and the imports) and replace one whenever it hangs or dies; nothing else is shared. A child
is ``python -m autotune.process.child_main``, so any script, notebook or stdin can start one
(a ``multiprocessing`` spawn re-imports ``__main__``). Every child dies with the process that
started it, however that one ends: Linux's parent-death signal kills it at once, and an
orphan watch covers other systems.
"""
from __future__ import annotations

import ctypes
import os
import queue
import resource
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any, Callable, Iterator, Optional, TypeVar

_JOIN_S = 2.0  # how long a dying child gets to leave before it is killed
ORPHAN_POLL_S = 0.5  # how often a child checks that its parent still lives
_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
# Signals a child's own code does not raise by crashing: they come from outside (the OOM
# killer and `kill -9` send SIGKILL, `kill` SIGTERM). SIGSEGV, SIGBUS, SIGILL, SIGFPE and
# SIGABRT are the code's own.
EXTERNAL_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGHUP})


class ChildTimeout(Exception):
    """No message arrived before the deadline (the child may be hung)."""


class ChildDied(Exception):
    """The child's end of the pipe closed: it exited or was killed by a signal.

    ``signal`` is the signal that ended it (None: it exited, or we killed it ourselves)."""

    def __init__(self, reason: str, signal: Optional[int] = None) -> None:
        super().__init__(reason)
        self.signal = signal


class ChildProcess:
    """A worker interpreter running ``main(conn, *args)``; ``conn`` is its end of the socket.

    ``main`` and ``args`` must pickle by reference from an importable module (any module on
    this process's ``sys.path``, which the child gets)."""

    def __init__(self, main: Callable[..., None], args: tuple[Any, ...], name: str) -> None:
        self._main, self._args, self.name = main, args, name
        self.conn: Connection | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def started(self) -> bool:
        return self._proc is not None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        """Start the process (returns at once; the child says when it is ready)."""
        ours, theirs = socket.socketpair()
        try:
            fd = theirs.fileno()
            argv = [sys.executable, "-m", "autotune.process.child_main", str(fd),
                    str(os.getpid())]
            proc = _spawn(lambda: subprocess.Popen(argv, pass_fds=(fd,),
                                                   stdin=subprocess.DEVNULL))
        finally:
            theirs.close()  # so that the child's death shows up here as EOF
        conn = Connection(ours.detach())
        try:
            conn.send(list(sys.path))
            conn.send((self._main, self._args))
        except (OSError, ValueError):  # died at once: recv reports how
            pass
        self.conn, self._proc = conn, proc
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
            raise ChildDied(*self.exit_status()) from None

    def exit_reason(self) -> str:
        """'signal N' or 'exit code N' of a child whose pipe has closed."""
        return self.exit_status()[0]

    def exit_status(self) -> tuple[str, Optional[int]]:
        """(reason, ending signal or None) of a child whose pipe has closed."""
        if self._proc is None:
            return "not started", None
        try:
            code = self._proc.wait(_JOIN_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return "closed its pipe and was killed", None
        if code < 0:
            return f"signal {-code}", -code
        return f"exit code {code}", None

    def kill(self) -> None:
        """Kill the process now and forget it (a no-op when not started)."""
        proc, conn = self._proc, self.conn
        self._proc, self.conn = None, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            _reap(proc)
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
            _reap(proc)
        self.kill()


_T = TypeVar("_T")


class _Spawner:
    """One daemon thread that starts every child of this process.

    Linux sends the parent-death signal when the *thread* that forked a child ends, and
    children are (re)spawned from short-lived threads (the GPU build feed, job threads):
    forking from this thread, which lives as long as the process, ties them to the process.
    """

    _lock = threading.Lock()
    _instance: Optional["_Spawner"] = None

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._tasks: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = (
            queue.SimpleQueue())
        threading.Thread(target=self._loop, name="autotune-spawner", daemon=True).start()

    @classmethod
    def get(cls) -> "_Spawner":
        """This process's spawner, started on first use (a forked copy starts its own)."""
        with cls._lock:
            if cls._instance is None or cls._instance.pid != os.getpid():
                cls._instance = cls()
            return cls._instance

    def run(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the spawner thread and return its result (or raise its exception)."""
        done: Future[_T] = Future()
        self._tasks.put((fn, done))
        return done.result()

    def _loop(self) -> None:
        while True:
            fn, done = self._tasks.get()
            try:
                done.set_result(fn())
            except BaseException as err:  # handed to the caller
                done.set_exception(err)


def _spawn(start: Callable[[], _T]) -> _T:
    if threading.current_thread() is threading.main_thread():
        return start()  # the main thread lives as long as the process
    return _Spawner.get().run(start)


def _reap(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(_JOIN_S)
    except subprocess.TimeoutExpired:  # unkillable for now (D state): the kernel reaps it
        pass


def set_parent_death_signal() -> None:
    """SIGKILL this process when its parent ends (Linux ``prctl``; elsewhere nothing): it
    fires even while a native call holds the GIL, which the orphan watch needs."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no libc symbol: the orphan watch still runs
        pass


def exit_with_parent(parent: int) -> None:
    """Poll until ``parent`` is gone, then leave at once."""
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
