"""REST service latency under load: requests/s and p50/p95/p99 of `GET /best` and
`GET /jobs/{id}/trials` with 50 concurrent clients, while a tuning job runs; then abuse:
`/health` while 60 clients ask for generated LLVM IR (`/top?form=source`), and the service's
memory and processes before and after 1,000 bad requests.

Starts `autotune serve` on a temporary SQLite database (or uses ``--url`` with ``--key``; the
abuse tables need the server started here), submits a job, waits for its first batch, then
runs each endpoint for ``--duration`` seconds. Prints tables; the targets are p99 < 50 ms,
`/health` p99 < 100 ms under the code requests, and memory and process counts unchanged by
the bad requests. Asserts nothing.

    .venv/bin/python benchmarks/service.py [--clients 50] [--duration 10] [--url URL --key KEY]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import httpx

WORKLOAD = {"op": "matmul", "params": {"M": 128, "N": 128, "K": 128}}
TARGET_P99_MS = 50.0
TARGET_HEALTH_P99_MS = 100.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workdir: Path, db_url: Optional[str] = None,
                 env: Optional[dict[str, str]] = None) -> tuple[subprocess.Popen, str, str]:
    """`autotune serve` on ``db_url`` (default: a fresh SQLite file in ``workdir``) with
    ``env`` added to the environment; returns (process, url, api key)."""
    db_url = db_url or f"sqlite:///{workdir / 'bench.db'}"
    key = subprocess.run([sys.executable, "-m", "autotune.cli", "apikey", "create", "--db",
                          db_url, "--name", "bench"], capture_output=True, text=True,
                         check=True).stdout.strip().splitlines()[-1]
    port = free_port()
    env = {**os.environ, "AUTOTUNE_MAX_CONCURRENT_JOBS": "1", **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", "autotune.cli", "serve", "--db", db_url,
                             "--port", str(port)], cwd=workdir, env=env,
                            stdout=open(workdir / "server.log", "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(url + "/api/v1/health", timeout=1).status_code == 200:
                return proc, url, key
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"server did not start; see {workdir / 'server.log'}")


def submit_and_wait(url: str, key: str, trials: int) -> int:
    """Submit the background job and wait until its first batch is recorded."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"},
                      timeout=30) as c:
        job = c.post("/api/v1/jobs", json={"workload": WORKLOAD, "trials": trials,
                                           "tuner": "random"}).json()
        for _ in range(600):
            if c.get(f"/api/v1/jobs/{job['id']}").json()["trials_done"] > 0:
                return job["id"]
            time.sleep(0.2)
    raise SystemExit("the job recorded no trial in 2 minutes")


async def _get(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
               request: bytes) -> int:
    """One keep-alive HTTP/1.1 GET on an open connection; returns the status code."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    await reader.readexactly(length)
    return status


class KeepAlive:
    """One keep-alive HTTP/1.1 connection that times GETs, connecting anew after a failure."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port

    async def open(self) -> "KeepAlive":
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def get(self, request: bytes) -> tuple[float, bool]:
        """(seconds, whether it answered 200) of one GET ``request``."""
        t0 = time.perf_counter()
        try:
            ok = await _get(self.reader, self.writer, request) == 200
        except (OSError, asyncio.IncompleteReadError, ValueError):
            ok = False
            self.writer.close()
            await self.open()
        return time.perf_counter() - t0, ok

    def close(self) -> None:
        self.writer.close()


async def hammer(url: str, path: str, params: dict, clients: int,
                 duration: float) -> tuple[list[float], int, float]:
    """``clients`` loops of GET ``path`` for ``duration`` s: (latencies in s, errors, elapsed).

    A bare asyncio HTTP/1.1 client: a full HTTP library costs more CPU per request than the
    service does, and on a small machine the load generator would measure itself.
    """
    parsed = httpx.URL(url)
    target = httpx.URL(path, params=params).raw_path.decode()
    request = (f"GET {target} HTTP/1.1\r\nHost: {parsed.host}:{parsed.port}\r\n"
               f"Accept: application/json\r\n\r\n").encode()
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + duration

    async def one() -> None:
        nonlocal errors
        conn = await KeepAlive(parsed.host, parsed.port).open()
        try:
            while time.perf_counter() < stop:
                seconds, ok = await conn.get(request)
                latencies.append(seconds)
                errors += not ok
        finally:
            conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(clients)))
    return latencies, errors, time.perf_counter() - t0


async def probe_health(url: str, duration: float, every_s: float = 0.05) -> list[float]:
    """Latencies of one client asking `/health` every ``every_s`` for ``duration`` s."""
    latencies: list[float] = []
    stop = time.perf_counter() + duration
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            await c.get("/api/v1/health")
            latencies.append(time.perf_counter() - t0)
            await asyncio.sleep(every_s)
    return latencies


async def health_under_code_requests(url: str, job_id: int, clients: int,
                                     duration: float) -> tuple[list[float], list[float], int,
                                                               float]:
    """(`/health` latencies, `/top?form=source` latencies, their errors, elapsed s)."""
    code, health = await asyncio.gather(
        hammer(url, f"/api/v1/jobs/{job_id}/top", {"k": 10, "form": "source"}, clients,
               duration),
        probe_health(url, duration))
    return health, code[0], code[1], code[2]


def bad_requests(url: str, key: str, job_id: int) -> list[tuple[str, str, dict]]:
    """Requests a careless or hostile client sends: (method, path, httpx keyword arguments)."""
    deep = "[" * 5000
    huge = "9" * 5000
    wl = '{"op": "matmul", "params": {"M": %s, "N": 8, "K": 8}}'
    auth = {"Authorization": f"Bearer {key}"}
    return [
        ("GET", "/api/v1/jobs/100000000000000000000", {}),
        ("GET", "/api/v1/jobs", {"params": {"offset": 10**30, "limit": 10**30}}),
        ("GET", f"/api/v1/jobs/{job_id}/trials", {"params": {"offset": 2**70}}),
        ("GET", f"/api/v1/jobs/{job_id}/events", {"params": {"after": 2**70}}),
        ("GET", "/api/v1/best", {"params": {"workload": deep, "target": "llvm"}}),
        ("GET", "/api/v1/best", {"params": {"workload": wl % huge, "target": "llvm"}}),
        ("POST", "/api/v1/jobs", {"headers": {**auth, "Content-Type": "application/json"},
                                  "content": '{"workload": ' + wl % (2**61 - 1) + '}'}),
        ("POST", "/api/v1/jobs", {"headers": auth, "json": {
            "workload": {"op": "matmul", "params": {"M": 8, "N": 8, "K": 8}},
            "tuner": "xgb", "tuner_options": {"workers": 5000, "n_chains": 10**9}}}),
        ("POST", "/api/v1/jobs", {"headers": auth, "json": {
            "workload": {"op": "matmul", "params": {"M": 8, "N": 8, "K": 8}},
            "target": "llvm -mcpu=sapphirerapids -cores=100000"}}),
        ("POST", "/api/v1/jobs", {"headers": {**auth, "Content-Type": "application/json"},
                                  "content": "x" * (4 << 20)}),
        ("POST", "/api/v1/jobs", {"headers": {**auth, "Content-Type": "application/json"},
                                  "content": "{not json"}),
        ("POST", f"/api/v1/jobs/{job_id + 10**6}/cancel", {"headers": auth}),
        ("GET", "/api/v1/jobs/-1/top", {"params": {"k": 10**9, "form": "source"}}),
    ]


def process_tree(pgid: int) -> tuple[int, int]:
    """(processes in the session of ``pgid``, their resident memory in MiB), from /proc."""
    count, rss_kib = 0, 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[3]) != pgid:  # the session id (the server started a new session)
                continue
            status = (entry / "status").read_text()
        except (OSError, ValueError):
            continue
        count += 1
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss_kib += int(line.split()[1])
    return count, rss_kib // 1024


def abuse(url: str, key: str, job_id: int, rounds: int) -> list[tuple[str, int, int]]:
    """Send the bad requests until ``rounds`` have been sent; their status codes counted."""
    requests = bad_requests(url, key, job_id)
    codes: dict[tuple[str, int], int] = {}
    with httpx.Client(base_url=url, timeout=30) as c:
        for i in range(rounds):
            method, path, kwargs = requests[i % len(requests)]
            try:
                status = c.request(method, path, **kwargs).status_code
            except httpx.HTTPError:
                status = 0  # the connection failed or was cut
            label = f"{method} {path.split('?')[0]}"
            codes[(label, status)] = codes.get((label, status), 0) + 1
    return [(label, status, n) for (label, status), n in sorted(codes.items())]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per endpoint")
    parser.add_argument("--trials", type=int, default=2000, help="budget of the background job")
    parser.add_argument("--url", help="an already running service (needs --key)")
    parser.add_argument("--key", help="an API key of that service")
    parser.add_argument("--code-clients", type=int, default=60,
                        help="clients asking for generated code while /health is timed")
    parser.add_argument("--bad", type=int, default=1000, help="bad requests to send")
    args = parser.parse_args(argv)

    proc = None
    with tempfile.TemporaryDirectory(prefix="autotune-bench-") as tmp:
        if args.url:
            url, key = args.url.rstrip("/"), args.key or ""
        else:
            proc, url, key = start_server(Path(tmp))
        try:
            job_id = submit_and_wait(url, key, args.trials)
            cases = [
                ("GET /best", "/api/v1/best",
                 {"workload": json.dumps(WORKLOAD), "target": "llvm"}),
                ("GET /jobs/{id}/trials", f"/api/v1/jobs/{job_id}/trials",
                 {"limit": 100, "sort": "-gflops"}),
            ]
            rows = []
            for name, path, params in cases:
                lat, errors, elapsed = asyncio.run(hammer(url, path, params, args.clients,
                                                          args.duration))
                rows.append((name, len(lat) / elapsed, statistics.median(lat) * 1e3,
                             percentile(lat, 95) * 1e3, percentile(lat, 99) * 1e3, errors,
                             len(lat)))
            health, code, code_errors, code_s = asyncio.run(health_under_code_requests(
                url, job_id, args.code_clients, args.duration))
            before = process_tree(proc.pid) if proc is not None else None
            codes = abuse(url, key, job_id, args.bad)
            time.sleep(2.0)  # let anything the requests started settle
            after = process_tree(proc.pid) if proc is not None else None
            with httpx.Client(base_url=url) as c:
                job = c.get(f"/api/v1/jobs/{job_id}").json()
                target = job["target"]
        finally:
            if proc is not None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)

    print(f"\ntarget {target}; {os.cpu_count()} cores")
    print(f"{args.clients} concurrent clients, {args.duration:g} s per endpoint, while job "
          f"{job_id} ran ({job['trials_done']} of {job['trials']} trials, state {job['state']})")
    header = f"{'endpoint':<24}{'req/s':>9}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'errors':>8}" \
             f"{'requests':>10}  p99 < {TARGET_P99_MS:g} ms"
    print(header)
    print("-" * len(header))
    for name, rps, p50, p95, p99, errors, n in rows:
        verdict = "yes" if p99 < TARGET_P99_MS else "no"
        print(f"{name:<24}{rps:>9.0f}{p50:>9.1f}{p95:>9.1f}{p99:>9.1f}{errors:>8}{n:>10}  "
              f"{verdict}")

    print(f"\n/health (one client, every 50 ms) while {args.code_clients} clients ask for "
          f"/top?k=10&form=llvm for {args.duration:g} s")
    header = f"{'requests':<26}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}{'errors':>8}"
    print(header + f"  p99 < {TARGET_HEALTH_P99_MS:g} ms")
    print("-" * (len(header) + 16))
    for name, lat, errors in (("GET /health", health, 0), ("GET /top?form=source", code,
                                                           code_errors)):
        verdict = ("yes" if percentile(lat, 99) * 1e3 < TARGET_HEALTH_P99_MS else "no") \
            if name == "GET /health" else ""
        rate = len(lat) / (args.duration if name == "GET /health" else code_s)
        print(f"{name:<26}{rate:>9.0f}{statistics.median(lat) * 1e3:>9.1f}"
              f"{percentile(lat, 99) * 1e3:>9.1f}{max(lat) * 1e3:>9.1f}{errors:>8}  {verdict}")

    print(f"\n{args.bad} bad requests: answers")
    print(f"{'request':<40}{'status':>8}{'count':>8}")
    for label, status, n in codes:
        print(f"{label:<40}{status:>8}{n:>8}")
    if before is not None and after is not None:
        print(f"\nservice processes: {before[0]} before, {after[0]} after; resident memory "
              f"{before[1]} MiB before, {after[1]} MiB after (target: unchanged)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
