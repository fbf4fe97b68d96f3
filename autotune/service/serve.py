"""Running the service: `serve` (uvicorn) and `run_local_demo` (what `make run` starts)."""
from __future__ import annotations

import ipaddress
import logging
import sys
from typing import Optional

from autotune.db.engine import masked_url
from autotune.settings import Settings

DEMO_WORKLOAD = {"op": "matmul", "params": {"M": 512, "N": 512, "K": 512}}
DEMO_TRIALS = 64


class UnsafeBind(ValueError):
    """The settings would expose an unauthenticated service beyond this host."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address or ``localhost`` (other names may resolve
    anywhere)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(settings: Settings) -> None:
    """Refuse (`UnsafeBind`) to serve without API keys on anything but a loopback address."""
    if settings.auth_disabled and not is_loopback(settings.host):
        raise UnsafeBind(f"AUTOTUNE_AUTH_DISABLED is set, so the service binds only a loopback "
                         f"address (127.0.0.1, ::1, localhost), not {settings.host!r}: anyone "
                         f"who can reach it could submit and cancel jobs")


def serve(settings: Settings, *, log_level: str = "info", access_log: bool = False) -> None:
    """Serve the API and dashboard on ``settings.host``:``settings.port`` until interrupted.

    No access log by default: a line per request costs more than a cached response.
    `UnsafeBind` when auth is disabled and the host is not a loopback address."""
    check_bind(settings)
    import uvicorn

    from autotune.service.main import create_app

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(levelname)s:     %(name)s: %(message)s")
    # The event loop shares the interpreter with job, lease and code-generating threads: hand
    # it back every millisecond rather than every five, so that a cheap request (/health)
    # never waits several switch intervals behind a thread's Python work.
    sys.setswitchinterval(0.001)
    # Open event streams would hold a graceful shutdown forever: cut them after a few seconds.
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port,
                log_level=log_level, access_log=access_log, timeout_graceful_shutdown=3)


def queue_demo_job(settings: Settings, *, trials: int = DEMO_TRIALS) -> Optional[int]:
    """Queue the demo job (matmul 512^3) when the database has no jobs; returns its id."""
    from autotune.db import Database
    from autotune.ops import Workload
    from autotune.search.registry import DEFAULT_TUNER
    from autotune.service.schemas import JobSettings, stored_options
    from autotune.target import Target

    db = Database.open(settings.db_url)
    try:
        if db.list_jobs(limit=1)[1] > 0:
            return None
        # Straight into the database (not over HTTP, so no API key is needed): the
        # service's job manager picks queued jobs up when it starts.
        job = db.create_job(workload=Workload.from_dict(DEMO_WORKLOAD), target=Target("llvm"),
                            tuner=DEFAULT_TUNER, trials=trials,
                            options=stored_options(JobSettings(trials=trials)))
        return job.id
    finally:
        db.dispose()


def run_local_demo(settings: Optional[Settings] = None) -> None:
    """`make run`: queue the demo job if the database is empty, then serve the dashboard."""
    settings = settings or Settings()
    check_bind(settings)
    job_id = queue_demo_job(settings)
    url = f"http://{settings.host}:{settings.port}/"
    print(f"autotune: dashboard at {url}  (database {masked_url(settings.db_url)})",
          file=sys.stderr)
    if job_id is not None:
        print(f"autotune: queued demo job {job_id}: matmul 512x512x512, {DEMO_TRIALS} trials",
              file=sys.stderr)
    if not settings.auth_disabled:
        print(f"autotune: to submit jobs over HTTP, create a key: autotune apikey create "
              f"--db {masked_url(settings.db_url)}", file=sys.stderr)
    serve(settings)
