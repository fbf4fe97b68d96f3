"""Helpers of the service tests: a real `autotune serve` process, API keys, SSE reading.

The server runs in its own session (process group) so that its measurement children can be
cleaned up even after the server itself was SIGKILLed.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import httpx

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
SMALL_MATMUL = {"op": "matmul", "params": {"M": 64, "N": 64, "K": 64}}

# A short timing protocol (the settings' measure fields), where kernels' timings are not
# under test
SHORT_TIMING = {"AUTOTUNE_REPEAT": "3", "AUTOTUNE_MIN_REPEAT_MS": "5"}
# The servers': the tests check the service, not kernel quality.
FAST_MEASURE = {**SHORT_TIMING, "AUTOTUNE_MAX_CONCURRENT_JOBS": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def create_key(db_url: str, name: str = "tests") -> str:
    """A new API key through the CLI (`autotune apikey create`): its last stdout line."""
    out = subprocess.run([sys.executable, "-m", "autotune.cli", "apikey", "create", "--db",
                          db_url, "--name", name], capture_output=True, text=True, check=True,
                         timeout=60)
    return out.stdout.strip().splitlines()[-1]


@dataclass
class Server:
    """One `autotune serve` process on a free port, over ``db_url``."""

    db_url: str
    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    proc: Optional[subprocess.Popen] = None
    groups: list[int] = field(default_factory=list)
    starts: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> "Server":
        self.port = free_port()
        self.starts += 1
        log = open(self.workdir / f"server-{self.starts}.log", "w")
        env = {**os.environ, **FAST_MEASURE, **self.env, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autotune.cli", "serve", "--db", self.db_url,
             "--host", "127.0.0.1", "--port", str(self.port)],
            cwd=self.workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.groups.append(self.proc.pid)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server did not come up in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        return "\n".join(p.read_text() for p in sorted(self.workdir.glob("server-*.log")))

    def kill(self) -> None:
        """SIGKILL the server (a crash); its orphaned measurement children are killed too."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._kill_group(self.proc.pid)

    def stop(self) -> None:
        """SIGTERM (graceful), SIGKILL after a grace period; then its whole process group."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for group in self.groups:
            self._kill_group(group)

    @staticmethod
    def _kill_group(pgid: int) -> None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def client(self, key: Optional[str] = None, timeout: float = 30.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        # plain http to this host: no certificates to load (30 ms a client otherwise, which
        # the fuzzer's check after each of its thousands of requests paid)
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout, verify=False)


def events(client: httpx.Client, job_id: int, *, last_event_id: Optional[str] = None,
           timeout: float = 180.0) -> Iterator[tuple[str, Optional[str], Any]]:
    """(event, id, data) of a job's SSE stream until the server closes it."""
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    with client.stream("GET", f"/api/v1/jobs/{job_id}/events", headers=headers,
                       timeout=httpx.Timeout(timeout, connect=10)) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        event, event_id, data = "message", None, []
        for line in response.iter_lines():
            if line == "":
                if data:
                    yield event, event_id, json.loads("\n".join(data))
                event, data = "message", []
            elif line.startswith(":"):
                continue
            else:
                name, _, value = line.partition(":")
                value = value[1:] if value.startswith(" ") else value
                if name == "event":
                    event = value
                elif name == "id":
                    event_id = value
                elif name == "data":
                    data.append(value)


def wait_for(predicate: Any, timeout: float, interval: float = 0.2, what: str = "") -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
