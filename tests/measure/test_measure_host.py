"""What keeps measurement honest across processes: the host's CPU lock, and children that do
not outlive their parent."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from autotune.measure.host_lock import HostLock

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from autotune.measure.host_lock import HostLock
    with HostLock(Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def test_host_lock_excludes_another_process(tmp_path: Path) -> None:
    path = tmp_path / "cpu.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path), "1.0"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    t0 = time.monotonic()
    with HostLock(path):
        waited = time.monotonic() - t0
    holder.wait(10)
    assert waited > 0.5  # it waited for the other process to let go


def test_host_lock_excludes_another_holder_in_this_process(tmp_path: Path) -> None:
    import threading

    path, order = tmp_path / "cpu.lock", []
    first = HostLock(path)
    first.acquire()
    thread = threading.Thread(target=lambda: (HostLock(path).__enter__(), order.append("second")))
    thread.start()
    time.sleep(0.3)
    order.append("first released")
    first.release()
    thread.join(5)
    assert order == ["first released", "second"]


def test_a_job_that_must_stop_gives_up_its_wait_in_turn(tmp_path: Path) -> None:
    """A waiter that may stop waits in the kernel's queue like any other (a blocking one
    behind it still gets the lock in turn), gives up within a poll of being told, and the
    lock it would have taken is let go at once."""
    import fcntl
    import threading

    import pytest

    from autotune.measure.result import MeasureStopped

    path = tmp_path / "cpu.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path), "1.5"],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(MeasureStopped):
        HostLock(path).acquire(should_stop=stop.is_set)
    assert 0.25 < time.monotonic() - t0 < 1.0
    with HostLock(path):  # after the holder: the abandoned wait does not keep it
        waited = time.monotonic() - t0
    holder.wait(10)
    assert 1.0 < waited < 4.0
    patient = HostLock(path)
    patient.acquire(should_stop=lambda: False)  # free: taken at once, and held
    other = os.open(path, os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(other)
        patient.release()


SPAWN = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from autotune.process.child import ChildProcess
    from tests.measure.measure_fakes import busy_child

    if __name__ == "__main__":
        child = ChildProcess(busy_child, (), "orphan-test")
        child.start()
        child.recv(60)  # ready
        print(child.pid, flush=True)
        import time
        time.sleep(600)
""")


def test_measurement_children_die_with_their_parent(tmp_path: Path) -> None:
    script = tmp_path / "spawn.py"
    script.write_text(SPAWN)
    here = str(Path(__file__).resolve().parents[2])  # the repository: `tests` is a package
    parent = subprocess.Popen([sys.executable, str(script), here], stdout=subprocess.PIPE,
                              text=True)
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    os.kill(child_pid, 0)  # alive
    parent.send_signal(signal.SIGKILL)  # no clean exit: daemon children would be left
    parent.wait(10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.kill(child_pid, signal.SIGKILL)
    raise AssertionError("the runner outlived its SIGKILLed parent")
