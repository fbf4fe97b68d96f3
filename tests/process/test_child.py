"""Worker interpreters: a child runs a function of an importable module over its socket,
answers task by task, leaves when told, and its death is a `ChildDied` naming how."""
from __future__ import annotations

import os
import signal
from multiprocessing.connection import Connection

import pytest

from autotune.process.child import ChildDied, ChildProcess, ChildTimeout, tasks


def echo_squares(conn: Connection, offset: int) -> None:
    for task in tasks(conn):
        if task == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        conn.send(task * task + offset)


def test_a_child_answers_its_tasks_and_leaves_when_told() -> None:
    child = ChildProcess(echo_squares, (1,), "squares")
    child.start()
    try:
        assert child.recv(30) == ("ready", child.pid)
        for n in (2, 3):
            assert child.send(n)
            assert child.recv(10) == n * n + 1
        with pytest.raises(ChildTimeout):
            child.recv(0.05)
    finally:
        child.stop()
    assert not child.started and not child.send(4)


def test_a_killed_child_is_reported_with_its_signal() -> None:
    child = ChildProcess(echo_squares, (0,), "squares")
    child.start()
    try:
        child.recv(30)
        child.send("die")
        with pytest.raises(ChildDied) as died:
            child.recv(10)
        assert died.value.signal == signal.SIGKILL and "signal 9" in str(died.value)
    finally:
        child.kill()
