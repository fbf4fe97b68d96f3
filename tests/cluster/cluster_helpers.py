"""A real Ray cluster on this machine for the cluster tests: a head node and `autotune worker`
processes, each a Ray node of its own; everything runs in its own process group and is
killed with it."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _kill_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(grace)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(10)


@dataclass
class Head:
    """`ray start --head --block` on a free port, in its own session."""

    workdir: Path
    port: int = 0
    proc: Optional[subprocess.Popen] = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> "Head":
        self.port = free_port()
        log = open(self.workdir / "ray-head.log", "w")
        self.proc = subprocess.Popen(
            [str(VENV_BIN / "ray"), "start", "--head", "--block", f"--port={self.port}",
             "--num-cpus=0", "--include-dashboard=false", "--disable-usage-stats",
             "--object-store-memory=100000000", "--dashboard-agent-listen-port=0"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"ray head exited:\n{(self.workdir / 'ray-head.log').read_text()}")
            if "Ray runtime started" in (self.workdir / "ray-head.log").read_text():
                return self
            time.sleep(0.3)
        raise RuntimeError("ray head did not start in 90 s")

    def stop(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)


@dataclass
class WorkerProc:
    """One `autotune worker` process (a Ray node with its measurement actors)."""

    address: str
    args: list[str]
    workdir: Path
    name: str
    env: dict[str, str] = field(default_factory=dict)
    proc: Optional[subprocess.Popen] = None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"worker-{self.name}.log"

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    def spawn(self) -> "WorkerProc":
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autotune.cli", "worker", "--address", self.address,
             *self.args], stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 120.0) -> "WorkerProc":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"worker {self.name} exited {self.proc.returncode}:\n{self.log()}")
            if "autotune worker: ready" in self.log():
                return self
            time.sleep(0.3)
        raise RuntimeError(f"worker {self.name} not ready in {timeout} s:\n{self.log()}")

    def ids(self) -> list[str]:
        """The actor ids this worker printed ("... as <id>")."""
        return [line.rsplit(" as ", 1)[1].strip() for line in self.log().splitlines()
                if line.startswith("autotune worker: measuring")]

    def kill_node(self) -> None:
        """SIGKILL the worker and everything of its node (a lost host)."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            _kill_group(self.proc)
