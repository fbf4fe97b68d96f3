"""Read-only routes: the best record of a workload, the ops and tuners tables, health."""
from __future__ import annotations

import logging
from functools import lru_cache
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Query, Request, status
from fastapi.responses import Response

import autotune
from autotune.api import first_valid
from autotune.ops import OPS
from autotune.search.registry import describe_tuners
from autotune.service.cache import json_body, json_response
from autotune.service.deps import CacheDep, DbDep, ManagerDep, ReadAccess, SettingsDep, SourcesDep
from autotune.service.http import json_content
from autotune.service.schemas import (
    TARGET_PATTERN,
    BestPublic,
    Health,
    SourceStats,
    best_public,
)
from autotune.service.validation import check_target, parse_workload_query
from autotune.target import MAX_SPEC_CHARS, Target

router = APIRouter(tags=["records"])
log = logging.getLogger("autotune.service")


@router.get("/best", response_model=BestPublic, dependencies=[ReadAccess],
            responses={404: {"description": "no valid record for this workload and target"}})
async def get_best(db: DbDep, cache: CacheDep,
                   workload: Annotated[str, Query(
                       min_length=1, max_length=1024,  # URL-encoded, within the 16 KiB request line
                       description='workload JSON, e.g. {"op": "matmul", "params": {"M": 64, '
                                   '"N": 64, "K": 64}}',
                       json_schema_extra=json_content("WorkloadIn"))],
                   target: Annotated[str, Query(max_length=MAX_SPEC_CHARS,
                                                pattern=TARGET_PATTERN,
                                                description="target spec or key")] = "llvm"
                   ) -> Response:
    """The fastest valid record of a workload on a target (what `autotune.best(url=...)` reads)."""
    def make() -> bytes:
        wl = parse_workload_query(workload)
        tgt = _target(target)
        key = tgt.key
        skipped: list[str] = []
        found = first_valid(db, wl, tgt, skipped)
        if skipped:  # records of another version of the template's space
            log.warning("GET /best of %s on %s skipped %d record(s) not of its space "
                        "(first: %s)", wl, key, len(skipped), skipped[0])
        if found is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no valid record for {wl} on {key}")
        return json_body(best_public(found[0]))

    return json_response(await cache.fetch(("best", workload, target), make))


@lru_cache(maxsize=256)
def _target(spec: str) -> Target:
    # Parsing a target detects the host CPU's features: do it once per spec.
    return check_target(spec, ("query", "target"))


@router.get("/ops", dependencies=[ReadAccess])
def list_ops() -> list[dict[str, Any]]:
    """The operators that can be tuned, with their parameters."""
    return [spec.describe() for spec in OPS.values()]


@router.get("/tuners", dependencies=[ReadAccess])
def list_tuners() -> list[dict[str, Any]]:
    """The search strategies, with their options."""
    return describe_tuners()


@router.get("/health", response_model=Health,
            responses={503: {"description": "the database is unreachable"}})
async def health(request: Request, manager: ManagerDep, settings: SettingsDep,
                 sources: SourcesDep) -> Health:
    """Liveness: the service answers and its database is reachable (always open); its job
    threads (dead ones are started again here), executors and generated-code cache.

    Async and from memory: the database is checked every second by `DatabaseProbe`, so
    this answers at once however busy the request threads are."""
    probe = request.app.state.probe
    problem = probe.problem()
    if problem is not None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, problem)
    return Health(status="ok", version=autotune.__version__,
                  db=probe.reading.revision or "unmigrated",
                  workers=manager.workers, **manager.health(),
                  sources=SourceStats(**sources.stats()),
                  auth="off" if settings.auth_disabled else "on", owner=manager.owner)
