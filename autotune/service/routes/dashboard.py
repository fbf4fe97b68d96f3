"""The dashboard: static pages (jobs, one job, workers) that read the REST API and its
event streams."""
from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

router = APIRouter(include_in_schema=False)


@router.get("/")
def jobs_page() -> FileResponse:
    """The job list."""
    return FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-cache"})


@router.get("/jobs/{job_id}")
def job_page(job_id: int) -> FileResponse:
    """One job, live (the page reads the id from its URL)."""
    return FileResponse(STATIC_DIR / "job.html", headers={"Cache-Control": "no-cache"})


@router.get("/workers")
def workers_page() -> FileResponse:
    """The measurement workers and each target's load."""
    return FileResponse(STATIC_DIR / "workers.html", headers={"Cache-Control": "no-cache"})
