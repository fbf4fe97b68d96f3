"""Generated source of one config, made in a worker process of its own.

The service shows recorded configs' code (`autotune.service.sources`); making it lowers the
schedule and emits LLVM IR or CUDA C, seconds of pure Python that would hold the service's
interpreter lock away from its event loop. A child at the lowest CPU priority makes it
instead, so /health and the other routes keep answering and a kernel timed meanwhile keeps
the cores.
"""
from __future__ import annotations

import os
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Mapping

from autotune import driver
from autotune.process.child import child_setup, tasks

if TYPE_CHECKING:
    from autotune.ops import Workload
    from autotune.target import Target


def make_source(workload: "Workload", target: "Target", config: Mapping[str, Any],
                form: str) -> str:
    """The ``form`` source of ``config`` (its ``{"index", "knobs"}`` dict); raises on failure.

    ``loop``: the scheduled loop AST; ``source``: what ``driver.build`` returns as its source
    without the costly half (LLVM IR before O3 and object code; CUDA C before nvcc)."""
    if form == "loop":
        return str(driver.lower(workload, target, dict(config)))
    return driver.source(workload, target, dict(config))


def serve(conn: Connection) -> None:
    """Child main: answer each ``(workload, target, config, form)`` with ``("ok", text)`` or
    ``("error", message)`` until the parent sends ``None`` or goes away."""
    child_setup()
    try:
        os.nice(19)
    except OSError:
        pass
    for workload, target, config, form in tasks(conn):
        try:
            reply = ("ok", make_source(workload, target, config, form))
        except Exception as err:  # a config from an older space, a codegen failure...
            reply = ("error", f"{type(err).__name__}: {err}")
        conn.send(reply)
    conn.close()
