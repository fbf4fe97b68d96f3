"""`create_app(settings)`: assembles the FastAPI app; everything it uses is made here."""
from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware

import autotune
from autotune.cluster.factory import make_executor
from autotune.cluster.registry import WorkerRegistry  # Ray: an optional extra
from autotune.db import Database
from autotune.job_options import MeasureOverrides
from autotune.measure.options import MeasureOptions
from autotune.service import http
from autotune.service.cache import ResponseCache
from autotune.service.events import StreamLimits
from autotune.service.executors import ExecutorFactory, ExecutorPool
from autotune.service.manager import JobManager, TuneFn, default_tune
from autotune.service.probe import DatabaseProbe
from autotune.service.routes import dashboard, jobs, meta, model_runs, workers
from autotune.service.sources import SourceCache
from autotune.settings import Settings

if TYPE_CHECKING:
    from autotune.cluster.registry import WorkerRegistry
    from autotune.target import Target

API_PREFIX = "/api/v1"


def executor_factory_of(settings: Settings, registry: Any = None) -> ExecutorFactory:
    """Makes a job's executors (`autotune.cluster.factory.make_executor`), measuring with
    the settings' options overridden by the job's: on the cluster's workers through the
    shared ``registry`` when there is one (they time with their own settings; the options
    set the dispatcher's deadlines), else on this host."""
    def make(target: "Target", measure_options: MeasureOverrides) -> object:
        options = MeasureOptions.from_settings(settings, measure_options)
        return make_executor(target, options, registry=registry)
    return make


def body_too_large(limit: int) -> Callable[[Request, Exception], Awaitable[Response]]:
    """The 413 answer: names the body and the limit, and closes the connection (the rest of
    the body is never read)."""
    async def answer(request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": [{"loc": ["body"], "type": "too_large",
                                         "msg": f"request body larger than {limit} bytes "
                                                "(AUTOTUNE_MAX_BODY_BYTES)"}]},
                            status_code=413, headers={"Connection": "close"})
    return answer


def create_app(settings: Optional[Settings] = None, *, tune_fn: TuneFn = default_tune,
               executor_factory: Optional[ExecutorFactory] = None) -> FastAPI:
    """The service app; the database is opened (and migrated) and workers start on startup.

    With ``settings.ray_address``, jobs measure on that Ray cluster's workers."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        registry, pool = _executors(settings, executor_factory)
        app.state.registry, app.state.executors = registry, pool
        db = Database.open(settings.db_url)
        manager = JobManager(db, pool, workers=settings.max_concurrent_jobs, tune_fn=tune_fn,
                             lease_s=settings.job_lease_s, db_retry_s=settings.job_db_retry_s)
        app.state.settings, app.state.db, app.state.manager = settings, db, manager
        app.state.sources = SourceCache(workers=settings.source_workers,
                                        timeout_s=settings.source_timeout_s)
        app.state.cache = ResponseCache(lambda: manager.notifier.version)
        app.state.probe = DatabaseProbe(db)
        manager.start()
        try:
            yield
        finally:
            app.state.probe.close()
            app.state.sources.close()
            manager.close()
            db.dispose()
            if registry is not None:
                registry.close()

    # max_body_size: FastAPI's body-limit middleware answers 413 on a Content-Length above it,
    # or as soon as a streamed body passes it, before the body is read whole or a key checked.
    app = FastAPI(title="autotune", version=autotune.__version__, lifespan=lifespan,
                  max_body_size=settings.max_body_bytes,
                  description="Submit operator tuning jobs, follow them live, query the best "
                              "schedules. Writes need `Authorization: Bearer <API key>`.")
    app.add_exception_handler(413, body_too_large(settings.max_body_bytes))
    # A Host header check: a DNS-rebinding page cannot reach a service bound to localhost.
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=settings.trusted_hosts())
    app.state.streams = StreamLimits(settings.max_event_streams,
                                     settings.max_event_streams_per_client)
    _routes(app)
    http.install(app, settings)
    return app


def _executors(settings: Settings, factory: Optional[ExecutorFactory]
               ) -> tuple[Optional["WorkerRegistry"], ExecutorPool]:
    """The jobs' executors: on the Ray cluster of ``settings.ray_address`` (with the
    registry of its workers), else ``factory``'s or this host's."""
    if settings.ray_address and factory is None:
        registry = WorkerRegistry(settings.ray_address).start()
        return registry, ExecutorPool(executor_factory_of(settings, registry), locked=False,
                                      idle_s=settings.executor_idle_s)
    return None, ExecutorPool(factory or executor_factory_of(settings),
                              idle_s=settings.executor_idle_s)


def _routes(app: FastAPI) -> None:
    app.include_router(jobs.router, prefix=API_PREFIX)
    app.include_router(meta.router, prefix=API_PREFIX)
    app.include_router(workers.router, prefix=API_PREFIX)
    app.include_router(model_runs.router, prefix=API_PREFIX)
    app.include_router(dashboard.router)
    app.include_router(model_runs.pages)
    app.mount("/static", StaticFiles(directory=dashboard.STATIC_DIR), name="static")
