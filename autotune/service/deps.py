"""Request dependencies as ``Annotated`` aliases: the database, the job manager, settings, auth.

Auth: writes need ``Authorization: Bearer <key>`` (keys from ``autotune apikey create``);
reads need one only with ``require_key_for_reads``. A missing key is 401 (with
``WWW-Authenticate: Bearer``), a wrong or revoked key 403. ``auth_disabled`` turns it off;
writes then still need proof that no other site's page sent them (a browser sends a form
cross-site without asking): a JSON body, or ``Origin``/``Sec-Fetch-Site`` naming this
service. Otherwise 403.
"""
from __future__ import annotations

from typing import Annotated, Optional
from urllib.parse import urlsplit

from anyio import to_thread
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from autotune.db import Database
from autotune.service.cache import ResponseCache
from autotune.service.manager import JobManager
from autotune.service.sources import SourceCache
from autotune.settings import Settings

# The dashboard cannot set headers on an EventSource: it keeps the key in this cookie.
KEY_COOKIE = "autotune_key"

_bearer = HTTPBearer(auto_error=False, description="an API key from `autotune apikey create`")


# Plain reads of app.state: async, so that FastAPI does not hand each one to a thread.
async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_db(request: Request) -> Database:
    return request.app.state.db


async def get_manager(request: Request) -> JobManager:
    return request.app.state.manager


async def get_sources(request: Request) -> SourceCache:
    return request.app.state.sources


async def get_cache(request: Request) -> ResponseCache:
    return request.app.state.cache


SettingsDep = Annotated[Settings, Depends(get_settings)]
DbDep = Annotated[Database, Depends(get_db)]
ManagerDep = Annotated[JobManager, Depends(get_manager)]
SourcesDep = Annotated[SourceCache, Depends(get_sources)]
CacheDep = Annotated[ResponseCache, Depends(get_cache)]
Credentials = Annotated[Optional[HTTPAuthorizationCredentials], Depends(_bearer)]


def _check(db: Database, key: Optional[str]) -> None:
    if not key:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, "an API key is required: send "
                            "'Authorization: Bearer <key>'", headers={"WWW-Authenticate": "Bearer"})
    if not db.verify_api_key(key):
        raise HTTPException(status.HTTP_403_FORBIDDEN, "invalid or revoked API key")


async def require_write_key(request: Request, settings: SettingsDep, db: DbDep,
                            creds: Credentials) -> None:
    """Writes: a valid key in the Authorization header (never a cookie: no CSRF). Without
    auth, a write that may come from another site's page is refused instead."""
    if not settings.auth_disabled:
        await to_thread.run_sync(_check, db, creds.credentials if creds else None)
        return
    reason = cross_site_reason(request)
    if reason is not None:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"refused a write that may come from "
                            f"another site ({reason}): send 'Content-Type: application/json' "
                            f"or, from a page, an Origin of this service")


def cross_site_reason(request: Request) -> Optional[str]:
    """Why a write may have been sent by another site's page, or None when it was not.

    A cross-site page cannot send JSON without a CORS preflight (which this service never
    grants), and browsers name the page's origin in ``Origin`` and ``Sec-Fetch-Site``."""
    site = request.headers.get("sec-fetch-site")
    origin = request.headers.get("origin")
    if site is not None and site not in ("same-origin", "none"):
        return f"Sec-Fetch-Site is {site!r}"
    if origin is not None and urlsplit(origin).netloc.lower() != request.headers.get(
            "host", "").lower():
        return f"Origin {origin!r} is not this service"
    if site is not None or origin is not None:
        return None  # a browser vouching for a page of ours
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        return None
    return "no JSON Content-Type and no Origin or Sec-Fetch-Site header"


async def require_read_key(request: Request, settings: SettingsDep, db: DbDep,
                           creds: Credentials) -> None:
    """Reads: open unless ``require_key_for_reads``; then a key in the header or cookie."""
    if settings.require_key_for_reads and not settings.auth_disabled:
        key = creds.credentials if creds else request.cookies.get(KEY_COOKIE)
        await to_thread.run_sync(_check, db, key)


WriteAccess = Depends(require_write_key)
ReadAccess = Depends(require_read_key)
