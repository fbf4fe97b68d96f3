"""HTTP details the framework leaves loose: a published schema true to the auth settings,
and 405 answers that list every method of the path.

Reads are open unless ``require_key_for_reads``; the schema then marks their key as
optional (``security: [{}, {bearer}]``), so clients and fuzzers are not told a key is needed.
"""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from autotune.settings import Settings


def install(app: FastAPI, settings: Settings) -> None:
    """Patch ``app``'s OpenAPI schema and its 405 answers."""
    _publish_optional_read_keys(app, settings)
    app.add_exception_handler(StarletteHTTPException, _http_error)


def _publish_optional_read_keys(app: FastAPI, settings: Settings) -> None:
    build = app.openapi
    open_reads = settings.auth_disabled or not settings.require_key_for_reads
    open_writes = settings.auth_disabled

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        for operations in schema.get("paths", {}).values():
            for method, operation in operations.items():
                optional = open_writes or (open_reads and method == "get")
                security = operation.get("security")
                if optional and security and {} not in security:
                    operation["security"] = [{}, *security]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code != 405:
        return await http_exception_handler(request, exc)
    # Starlette names only the methods of the first route that matched the path.
    allowed: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        methods = getattr(route, "methods", None)
        if match != Match.NONE and methods:
            allowed |= set(methods)
    return JSONResponse({"detail": exc.detail}, status_code=405,
                        headers={"Allow": ", ".join(sorted(allowed))})
