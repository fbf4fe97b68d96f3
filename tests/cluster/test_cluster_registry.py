"""`WorkerRegistry` shows what a worker does now: a status answer is read up to a refresh
later, so a chunk that came back makes its worker idle, and an older answer read after that
does not make it busy again (issue 29: a finished job's worker was still listed busy on it)."""
from __future__ import annotations

import threading
import time

from autotune.cluster import ACTOR_PREFIX
from autotune.cluster.actor import Chunk, MeasureWorker, SleepDevice
from autotune.cluster.devices import Device
from autotune.cluster.registry import WorkerRegistry

KEY = "llvm -mcpu=x86-64-v3 -cores=4"


def _busy_status(worker: MeasureWorker, chunk: Chunk) -> tuple[dict, threading.Thread]:
    """The worker's status while it measures ``chunk`` (in a thread, as its actor does)."""
    thread = threading.Thread(target=worker.measure, args=(chunk,))
    thread.start()
    deadline = time.monotonic() + 10
    while not (status := worker.status())["busy"]:
        assert time.monotonic() < deadline, "the worker never started the chunk"
        time.sleep(0.005)
    return status, thread


def test_a_chunk_back_makes_its_worker_idle_and_older_answers_do_not_undo_it() -> None:
    device = Device(KEY, KEY, "synthetic")
    worker = MeasureWorker("host-1/sim0", device, synthetic=SleepDevice(0.2))
    registry = WorkerRegistry(None)  # never started: statuses are applied by hand
    view = registry.track(ACTOR_PREFIX + "host-1/sim0", handle=None)

    first = Chunk(1, 7, "{}", KEY, (1, 2))
    stale, thread = _busy_status(worker, first)
    assert registry.apply_status(view, stale)  # became live
    public = registry.snapshot()[0]
    assert (public["state"], public["job"], public["worker"]) == ("busy", 7, "host-1/sim0")
    thread.join()

    # The dispatcher hears the chunk back before it hands the results on.
    registry.chunk_done(view.name, 1, 7)
    assert (view.state, view.job, view.chunk) == ("idle", None, None)
    # The answer given while it was busy, read on the registry's next refresh: still idle.
    registry.apply_status(view, stale)
    assert (view.state, view.job) == ("idle", None)
    assert registry.snapshot()[0]["state"] == "idle"

    # A new chunk is news, whoever sent it.
    busy, thread = _busy_status(worker, Chunk(2, 8, "{}", KEY, (3,)))
    registry.apply_status(view, busy)
    assert (view.state, view.job, view.chunk) == ("busy", 8, 2)
    thread.join()
    registry.apply_status(view, worker.status())
    assert (view.state, view.job) == ("idle", None)
