"""`create_app(settings)`: assembles the FastAPI app; everything it uses is made here."""
from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Optional

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

import autotune
from autotune.service.cache import ResponseCache
from autotune.db import Database
from autotune.service.executors import ExecutorPool
from autotune.service.manager import JobManager, TuneFn, default_tune
from autotune.service.routes import dashboard, jobs, meta, workers
from autotune.service.sources import SourceCache
from autotune.settings import Settings

if TYPE_CHECKING:
    from autotune.target import Target

API_PREFIX = "/api/v1"


def local_executor_factory(settings: Settings) -> Callable[["Target"], object]:
    """Makes one LocalExecutor per target with the settings' measurement options."""
    def make(target: "Target") -> object:
        from autotune.measure import LocalExecutor

        return LocalExecutor(target, settings.measure_options())
    return make


def ray_executor_factory(settings: Settings, registry: Any) -> Callable[["Target"], object]:
    """Makes one RayExecutor per target over the cluster's shared worker registry."""
    def make(target: "Target") -> object:
        from autotune.cluster.executor import RayExecutor

        return RayExecutor(target, registry=registry, options=settings.measure_options())
    return make


def create_app(settings: Optional[Settings] = None, *, tune_fn: TuneFn = default_tune,
               executor_factory: Optional[Callable[["Target"], object]] = None) -> FastAPI:
    """The service app; the database is opened (and migrated) and workers start on startup.

    With ``settings.ray_address``, jobs measure on that Ray cluster's workers."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        registry = None
        if settings.ray_address and executor_factory is None:
            from autotune.cluster.registry import WorkerRegistry

            registry = WorkerRegistry(settings.ray_address).start()
            pool = ExecutorPool(ray_executor_factory(settings, registry), locked=False)
        else:
            pool = ExecutorPool(executor_factory or local_executor_factory(settings))
        app.state.registry, app.state.executors = registry, pool
        db = Database.open(settings.db_url)
        manager = JobManager(db, pool, workers=settings.max_concurrent_jobs, tune_fn=tune_fn,
                             lease_s=settings.job_lease_s)
        app.state.settings, app.state.db, app.state.manager = settings, db, manager
        app.state.sources = SourceCache(pool.device_lock)
        app.state.cache = ResponseCache(lambda: manager.notifier.version)
        manager.start()
        try:
            yield
        finally:
            manager.close()
            db.dispose()
            if registry is not None:
                registry.close()

    app = FastAPI(title="autotune", version=autotune.__version__, lifespan=lifespan,
                  description="Submit operator tuning jobs, follow them live, query the best "
                              "schedules. Writes need `Authorization: Bearer <API key>`.")
    app.include_router(jobs.router, prefix=API_PREFIX)
    app.include_router(meta.router, prefix=API_PREFIX)
    app.include_router(workers.router, prefix=API_PREFIX)
    app.include_router(dashboard.router)
    app.mount("/static", StaticFiles(directory=dashboard.STATIC_DIR), name="static")
    return app
