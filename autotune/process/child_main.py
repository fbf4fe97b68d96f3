"""Entry of every measurement child: ``python -m autotune.process.child_main FD PARENT``.

A child is its own interpreter started on this module, not a ``multiprocessing`` spawn: such
a spawn re-imports the parent's ``__main__``, which fails for a script without a main guard,
a notebook or a script piped to ``python -``. The parent sends ``sys.path`` first (so that
what it sends next unpickles here), then ``(main, args)``; this module arms the parent-death
signal and runs ``main(conn, *args)`` on the same socket.
"""
from __future__ import annotations

import os
import sys
import threading
from multiprocessing.connection import Connection

from autotune.process.child import exit_with_parent, set_parent_death_signal


def run(fd: int, parent: int) -> None:
    """Connect on ``fd``, die with ``parent``, receive the entry point and run it."""
    set_parent_death_signal()
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    # Also polled: the signal is Linux-only, and the watch needs no help from the kernel.
    threading.Thread(target=exit_with_parent, args=(parent,), name="autotune-orphan-watch",
                     daemon=True).start()
    conn = Connection(fd)
    try:
        path = conn.recv()
        sys.path[:] = [p for p in path if isinstance(p, str)]
        main, args = conn.recv()
    except (EOFError, OSError):  # the parent gave up on us before we started
        os._exit(1)
    main(conn, *args)


if __name__ == "__main__":
    run(int(sys.argv[1]), int(sys.argv[2]))
