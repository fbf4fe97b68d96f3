"""REST reads under load, on SQLite and on PostgreSQL: requests/s and p50/p99 of every read
endpoint the dashboard uses, with 50 keep-alive clients while a job tunes and 50 event
streams follow it.

For each database, starts `autotune serve` (a fresh SQLite file; a fresh database on the
PostgreSQL server of ``--pg-url``, by default the test suite's, which
scripts/start-postgres.sh starts), submits a tuning job, waits for its first batch, opens
``--streams`` event streams on it, then runs ``--clients`` keep-alive clients for
``--duration`` seconds, each cycling over the endpoints from its own starting point. Prints
a table per database, with the server's CPU time over the run and with only the streams
open. Targets: p99 <= 100 ms on every endpoint on SQLite, <= 150 ms on PostgreSQL, no
errors. Asserts nothing; time it with nothing else running.

    .venv/bin/python benchmarks/service_load.py [--db sqlite,postgres] [--clients 50]
        [--streams 50] [--duration 10] [--pg-url URL]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional

import httpx

sys.path.insert(0, os.path.dirname(__file__))

from service import (  # noqa: E402
    WORKLOAD,
    KeepAlive,
    percentile,
    start_server,
    submit_and_wait,
)

PG_URL = os.environ.get("AUTOTUNE_TEST_PG_URL",
                        "postgresql+psycopg://postgres@127.0.0.1:54329/autotune_test")
TARGET_P99_MS = {"sqlite": 100.0, "postgres": 150.0}
# The server lets this many streams in from one address (the benchmark's clients share one).
ENV = {"AUTOTUNE_MAX_EVENT_STREAMS_PER_CLIENT": "256"}


def endpoints(job_id: int) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, path, query) of the reads: the dashboard's job list and job page, `/best`."""
    job = f"/api/v1/jobs/{job_id}"
    return [("GET /health", "/api/v1/health", {}),
            ("GET /jobs", "/api/v1/jobs", {"limit": 50}),
            ("GET /jobs/{id}", job, {}),
            ("GET /jobs/{id}/trials", f"{job}/trials", {"limit": 100, "sort": "-gflops"}),
            ("GET /jobs/{id}/workers", f"{job}/workers", {}),
            ("GET /jobs/{id}/curves", f"{job}/curves", {}),
            ("GET /best", "/api/v1/best", {"workload": json.dumps(WORKLOAD), "target": "llvm"}),
            ("GET /workers", "/api/v1/workers", {}),
            ("GET /model-runs", "/api/v1/model-runs", {})]


async def mixed(url: str, cases: list[tuple[str, str, dict[str, Any]]], clients: int,
                duration: float) -> tuple[dict[str, list[float]], dict[str, int], float]:
    """``clients`` keep-alive connections, each cycling over ``cases`` for ``duration``
    seconds: (latencies in s by case, errors by case, elapsed s)."""
    parsed = httpx.URL(url)
    requests = [(name, (f"GET {httpx.URL(path, params=query).raw_path.decode()} HTTP/1.1\r\n"
                        f"Host: {parsed.host}:{parsed.port}\r\nAccept: application/json\r\n\r\n"
                        ).encode()) for name, path, query in cases]
    latencies: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    errors = dict.fromkeys(latencies, 0)
    stop = time.perf_counter() + duration

    async def client(first: int) -> None:
        conn = await KeepAlive(parsed.host, parsed.port).open()
        i = first
        try:
            while time.perf_counter() < stop:
                name, request = requests[i % len(requests)]
                i += 1
                seconds, ok = await conn.get(request)
                latencies[name].append(seconds)
                errors[name] += not ok
        finally:
            conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(clients)))
    return latencies, errors, time.perf_counter() - t0


async def follow(url: str, job_id: int, streams: int, seconds: float) -> tuple[int, int]:
    """``streams`` event streams of the job held open for ``seconds``: (streams that
    answered 200, events they received)."""
    parsed = httpx.URL(url)
    request = (f"GET /api/v1/jobs/{job_id}/events HTTP/1.1\r\nHost: {parsed.host}:"
               f"{parsed.port}\r\nAccept: text/event-stream\r\n\r\n").encode()

    async def one() -> tuple[bool, int]:
        reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
        writer.write(request)
        events, ok = 0, False
        end = time.monotonic() + seconds
        try:
            while (left := end - time.monotonic()) > 0:
                try:
                    line = await asyncio.wait_for(reader.readline(), left)
                except asyncio.TimeoutError:
                    break
                if not line:
                    break
                ok = ok or line.startswith(b"HTTP/1.1 200")
                events += line.startswith(b"event:")
        finally:
            writer.close()
        return ok, events

    found = await asyncio.gather(*(one() for _ in range(streams)))
    return sum(ok for ok, _ in found), sum(n for _, n in found)


def cpu_s(pid: int) -> float:
    """CPU seconds of process ``pid`` so far (user and system)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:13]) / os.sysconf("SC_CLK_TCK")


@contextmanager
def pg_database(server_url: str) -> Iterator[str]:
    """A fresh database on the PostgreSQL server of ``server_url`` (dropped after)."""
    import psycopg
    from sqlalchemy.engine import make_url

    url = make_url(server_url)
    admin = url.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"autotune_bench_{os.getpid()}_{secrets.token_hex(3)}"
    with psycopg.connect(admin, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
        try:
            yield url.set(database=name).render_as_string(hide_password=False)
        finally:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def run(db: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One database's figures."""
    with (pg_database(args.pg_url) if db == "postgres" else _nothing()) as pg:
        proc, url, key = start_server(workdir, pg, ENV)
        try:
            job_id = submit_and_wait(url, key, args.trials)
            quiet_t0, quiet_cpu = time.monotonic(), cpu_s(proc.pid)
            streams_only = asyncio.run(follow(url, job_id, args.streams, 5.0))
            quiet = (cpu_s(proc.pid) - quiet_cpu) / (time.monotonic() - quiet_t0)

            async def load() -> Any:
                return await asyncio.gather(
                    mixed(url, endpoints(job_id), args.clients, args.duration),
                    follow(url, job_id, args.streams, args.duration))

            busy_cpu = cpu_s(proc.pid)
            (latencies, errors, elapsed), (streaming, events) = asyncio.run(load())
            busy = (cpu_s(proc.pid) - busy_cpu) / elapsed
            with httpx.Client(base_url=url, timeout=30) as c:
                job = c.get(f"/api/v1/jobs/{job_id}").json()
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
    return {"latencies": latencies, "errors": errors, "elapsed": elapsed, "job": job,
            "streams": streaming, "events": events, "quiet": quiet, "busy": busy,
            "streams_only": streams_only}


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


def report(db: str, args: argparse.Namespace, found: dict[str, Any]) -> None:
    job, target = found["job"], TARGET_P99_MS[db]
    total = sum(len(v) for v in found["latencies"].values())
    print(f"\n{db}: target {job['target']}; {os.cpu_count()} cores; {args.clients} keep-alive "
          f"clients for {args.duration:g} s while job {job['id']} tuned ({job['trials_done']} "
          f"of {job['trials']} trials by the end, {job['state']}) and {found['streams']} of "
          f"{args.streams} event streams followed it ({found['events']} events)")
    header = (f"{'endpoint':<24}{'req/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
              f"{'errors':>8}{'requests':>10}  p99 <= {target:g} ms")
    print(header)
    print("-" * len(header))
    for name, lat in found["latencies"].items():
        if not lat:
            continue
        p99 = percentile(lat, 99) * 1e3
        ok = "yes" if p99 <= target and not found["errors"][name] else "no"
        print(f"{name:<24}{len(lat) / found['elapsed']:>8.0f}{statistics.median(lat) * 1e3:>9.1f}"
              f"{p99:>9.1f}{max(lat) * 1e3:>9.1f}{found['errors'][name]:>8}{len(lat):>10}  {ok}")
    print(f"{'all':<24}{total / found['elapsed']:>8.0f}")
    opened, events = found["streams_only"]
    print(f"service process CPU (its job's search included, not its measuring children): "
          f"{found['busy']:.2f} cores under the load; {found['quiet']:.2f} with only the "
          f"{opened} streams open ({events} events in 5 s)")


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="sqlite,postgres",
                        help="databases to run on, comma-separated: sqlite, postgres")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--streams", type=int, default=50, help="event streams on the job")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load")
    parser.add_argument("--trials", type=int, default=2000, help="budget of the tuning job")
    parser.add_argument("--pg-url", default=PG_URL, help="a PostgreSQL server's URL")
    args = parser.parse_args(argv)
    for db in args.db.split(","):
        if db not in TARGET_P99_MS:
            parser.error(f"--db: unknown database {db!r}")
        with tempfile.TemporaryDirectory(prefix="autotune-load-") as tmp:
            report(db, args, run(db, args, Path(tmp)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
