"""The build worker's side: receive (build_fn, workload, target, config), answer a typed reply.

Replies: ``("ready", pid)`` once after start-up (``("failed", message)`` when the worker
cannot start: its preloaded module does not import), then per task ``("ok", artifact, seconds)``
or ``("error", ErrorKind value, message, seconds)``.
"""
from __future__ import annotations

import importlib
import sys
import time
import traceback
from multiprocessing.connection import Connection

from autotune.measure.result import ErrorKind
from autotune.process.child import child_setup, tasks


def serve(conn: Connection, preload: tuple[str, ...]) -> None:
    """Worker main loop; returns when the parent sends ``None`` or goes away."""
    child_setup()
    try:
        for module in preload:  # import the compiler now, not during the first timed build
            importlib.import_module(module)
    except Exception as err:  # the parent reports why no worker could start
        conn.send(("failed", describe(err, frames=1)))
        return
    for build_fn, workload, target, config in tasks(conn):
        t0 = time.perf_counter()
        try:
            artifact = build_fn(workload, target, config)
        except Exception as err:  # any failure of the build is the candidate's, not ours
            if _is_invalid_config(err):  # the reason is the message; a traceback adds nothing
                reply = ("error", ErrorKind.INSTANTIATION.value, str(err))
            else:
                reply = ("error", ErrorKind.COMPILE.value, describe(err))
            conn.send((*reply, time.perf_counter() - t0))
            continue
        elapsed = time.perf_counter() - t0
        try:
            conn.send(("ok", artifact, elapsed))
        except Exception as err:  # pickling failed before anything was written
            conn.send(("error", ErrorKind.COMPILE.value,
                       f"artifact cannot be sent to the runner: {describe(err)}", elapsed))
    conn.close()


def _is_invalid_config(err: BaseException) -> bool:
    # Looked up, not imported: a build_fn that raised InvalidConfig has imported the driver.
    driver = sys.modules.get("autotune.driver")
    return driver is not None and isinstance(err, driver.InvalidConfig)


def describe(err: BaseException, frames: int = 3) -> str:
    """'Type: message' plus where it was raised (the innermost few frames)."""
    head = "".join(traceback.format_exception_only(type(err), err)).strip()
    tb = traceback.extract_tb(err.__traceback__)[-frames:]
    where = "".join(traceback.format_list(tb)).rstrip()
    return f"{head}\n{where}" if where else head
