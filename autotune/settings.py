"""`Settings`: the one configuration object of the service and CLI, read from the environment.

Every field can be set as ``AUTOTUNE_<FIELD>`` (e.g. ``AUTOTUNE_DB_URL``, ``AUTOTUNE_PORT``)
or in a ``.env`` file. Nothing is read at import: construct ``Settings()`` where needed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from autotune.measure import MeasureOptions

DEFAULT_DB_URL = "sqlite:///autotune.db"


class Settings(BaseSettings):
    """Database, server, job and measurement settings (env prefix ``AUTOTUNE_``)."""

    model_config = SettingsConfigDict(env_prefix="AUTOTUNE_", env_file=".env",
                                      env_file_encoding="utf-8", extra="ignore")

    db_url: str = Field(DEFAULT_DB_URL, description="SQLAlchemy URL of the tuning database")
    host: str = Field("127.0.0.1", description="address the REST service binds")
    port: int = Field(8000, ge=1, le=65535, description="port the REST service binds")
    max_concurrent_jobs: int = Field(2, ge=1, description="tuning jobs run at the same time")
    job_lease_s: float = Field(
        30.0, ge=1.0, le=3600.0,
        description="seconds a running job's lease lasts unless renewed (every third of it); "
                    "another process takes over the job of an owner gone this long")
    require_key_for_reads: bool = Field(
        False, description="also require an API key for GET requests (writes always do)")
    auth_disabled: bool = Field(
        False, description="no API keys at all (local development only; never when exposed)")

    ray_address: Optional[str] = Field(
        None, description="address (HOST:PORT) of a Ray cluster to measure on; unset: measure "
                          "on this host")

    # Measurement (the timing protocol of DESIGN.md); defaults are MeasureOptions' defaults.
    repeat: int = Field(5, ge=1, description="timed repeats per config; the cost is their median")
    number: int = Field(1, ge=1, description="calls per repeat to start from (grown as needed)")
    min_repeat_ms: float = Field(20.0, ge=0,
                                 description="grow `number` until one repeat lasts this long")
    build_timeout: float = Field(10.0, gt=0, description="seconds one build may take")
    run_timeout: float = Field(10.0, gt=0, description="seconds one config's timing may take")

    def measure_options(self, **overrides: Any) -> "MeasureOptions":
        """`MeasureOptions` from the measurement fields, then ``overrides``."""
        from autotune.measure import MeasureOptions

        values = {name: getattr(self, name) for name in MEASURE_FIELDS}
        return MeasureOptions(**{**values, **overrides})


# Settings fields that are MeasureOptions fields of the same name.
MEASURE_FIELDS = ("repeat", "number", "min_repeat_ms", "build_timeout", "run_timeout")
