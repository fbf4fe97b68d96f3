"""HTTP details the framework leaves loose: a published schema true to the auth settings
and to query parameters that are JSON, 405 answers that list every method of the path, and
a bound on requests for generated code in flight, so that many of them never crowd out the
rest (`/health` above all).

Reads are open unless ``require_key_for_reads``; the schema then marks their key as
optional (``security: [{}, {bearer}]``), so clients and fuzzers are not told a key is needed.
"""
from __future__ import annotations

import asyncio
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Receive, Scope, Send

from autotune.settings import Settings


def install(app: FastAPI, settings: Settings) -> None:
    """Patch ``app``'s OpenAPI schema and its 405 answers."""
    _publish_optional_read_keys(app, settings)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_middleware(CodePagesInFlight, limit=CODE_PAGES_IN_FLIGHT)


# Requests for pages of generated code (`/jobs/{id}/top`) handled at once, sending included.
# Each costs the event loop about a millisecond; sixty at once put every other request
# behind sixty of them, while the ones waiting here cost nothing.
CODE_PAGES_IN_FLIGHT = 4


class CodePagesInFlight:
    """At most ``limit`` requests for `/top` pages in flight; the others wait their turn."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit
        self._slots: Optional[asyncio.Semaphore] = None  # made on the server's event loop

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].endswith("/top"):
            await self.app(scope, receive, send)
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        async with self._slots:
            await self.app(scope, receive, send)


def json_content(component: str) -> dict[str, Any]:
    """``json_schema_extra`` of a query parameter that is JSON of a schema component: the
    published schema gives it as OpenAPI parameter content of that schema (`install`)."""
    return {"contentMediaType": "application/json",
            "contentSchema": {"$ref": f"#/components/schemas/{component}"}}


def _json_content_parameters(schema: dict[str, Any]) -> None:
    """Parameters marked by `json_content` as ``content: {application/json: {schema}}``, so
    that clients (and fuzzers) send JSON of the component rather than any string."""
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            for param in operation.get("parameters", []):
                inner = param.get("schema", {})
                if inner.get("contentMediaType") == "application/json":
                    param.pop("schema")
                    param["content"] = {"application/json": {"schema": inner["contentSchema"]}}


def _publish_optional_read_keys(app: FastAPI, settings: Settings) -> None:
    build = app.openapi
    open_reads = settings.auth_disabled or not settings.require_key_for_reads
    open_writes = settings.auth_disabled

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        _json_content_parameters(schema)
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
