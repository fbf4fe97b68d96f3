"""Running the service: `serve` (uvicorn) and `run_local_demo` (what `make run` starts)."""
from __future__ import annotations

import ipaddress
import logging
import shutil
import signal
import sys
import threading
from functools import partial
from pathlib import Path
from typing import Callable, Optional

from autotune.db.url import masked_url
from autotune.service.demo import DEMO_NAME, DEMO_TRIALS, DemoRun, demo_done
from autotune.service.main import create_app
from autotune.settings import Settings

# Where the demo's model run writes its progress (the working directory, beside autotune.db).
DEMO_LOG = "autotune-demo.log"


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

    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(levelname)s:     %(name)s: %(message)s")
    # The event loop shares the interpreter with job, lease and code-generating threads: hand
    # it back every millisecond rather than every five, so that a cheap request (/health)
    # never waits several switch intervals behind a thread's Python work.
    sys.setswitchinterval(0.001)
    # Open event streams would hold a graceful shutdown forever: cut them after a few seconds.
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port,
                log_level=log_level, access_log=access_log, timeout_graceful_shutdown=3)


def run_local_demo(settings: Optional[Settings] = None, *, trials: int = DEMO_TRIALS) -> None:
    """`make run`: serve the dashboard while a small CNN is tuned beside it as a model run of
    ``trials`` (`autotune.service.demo`), unless the database holds that run finished."""
    settings = settings or Settings()
    check_bind(settings)
    url = f"http://{settings.host}:{settings.port}/"
    say = partial(print, file=sys.stderr, flush=True)
    say(f"autotune: dashboard at {url}  (database {masked_url(settings.db_url)})")
    demo: Optional[DemoRun] = None
    if demo_done(settings, trials):
        say(f"autotune: the demo model run ({DEMO_NAME}, {trials} trials) is done; see "
            f"{url}model-runs")
    else:
        demo = DemoRun(settings, trials, DEMO_LOG)
        say(f"autotune: tuning the demo model {DEMO_NAME} (7 tasks, {trials} trials, a few "
            f"minutes) beside the service: watch its jobs at {url} and the run at "
            f"{url}model-runs; its log: {DEMO_LOG}")
        threading.Thread(target=_report_end, args=(demo, say), daemon=True).start()
    if not settings.auth_disabled:
        say(f"autotune: to submit jobs over HTTP, create a key: {_cli()} apikey create "
            f"--db {masked_url(settings.db_url)}")
    say("autotune: press Ctrl-C to stop")
    try:
        serve(settings)
    finally:
        if demo is not None:
            demo.stop()


def _cli() -> str:
    """How to run `autotune` from this shell: by name when it is on PATH, else by its path
    (`make run` runs it from .venv without activating it)."""
    if shutil.which("autotune"):
        return "autotune"
    script = Path(sys.executable).parent / "autotune"
    return str(script.relative_to(Path.cwd()) if script.is_relative_to(Path.cwd()) else script)


def _report_end(demo: DemoRun, say: Callable[..., None]) -> None:
    code = demo.proc.wait()
    if code == 0:
        say(f"autotune: the demo model run is done (its summary: {DEMO_LOG})")
    elif code not in (130, -signal.SIGINT):  # not stopped by Ctrl-C
        say(f"autotune: the demo model run failed (exit status {code}; see {DEMO_LOG})")
