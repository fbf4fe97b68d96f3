"""`Settings`: the one configuration object of the service and CLI, read from the environment.

Every field can be set as ``AUTOTUNE_<FIELD>`` (e.g. ``AUTOTUNE_DB_URL``, ``AUTOTUNE_PORT``)
or in a ``.env`` file. Nothing is read at import: construct ``Settings()`` where needed.
"""
from __future__ import annotations

from typing import Annotated, Any, Optional

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from autotune.job_options import MEASURE_BOUNDS

DEFAULT_DB_URL = "sqlite:///autotune.db"


def _measure_field(name: str, default: float) -> Any:
    bound = MEASURE_BOUNDS[name]
    return Field(default=default, ge=bound.minimum, le=bound.maximum,
                 description=bound.description)


class Settings(BaseSettings):
    """Database, server, job and measurement settings (env prefix ``AUTOTUNE_``)."""

    model_config = SettingsConfigDict(env_prefix="AUTOTUNE_", env_file=".env",
                                      env_file_encoding="utf-8", extra="ignore")

    db_url: str = Field(default=DEFAULT_DB_URL,
                        description="SQLAlchemy URL of the tuning database, or a SQLite "
                                    "file's path")
    host: str = Field(default="127.0.0.1", description="address the REST service binds")
    port: int = Field(default=8000, ge=1, le=65535, description="port the REST service binds")
    max_concurrent_jobs: int = Field(
        default=2, ge=1, description="tuning jobs run at the same time")
    job_lease_s: float = Field(
        default=30.0, ge=1.0, le=3600.0,
        description="seconds a running job's lease lasts unless renewed (every third of it); "
                    "another process takes over the job of an owner gone this long")
    require_key_for_reads: bool = Field(
        default=False, description="also require an API key for GET requests (writes always do)")
    auth_disabled: bool = Field(
        default=False,
        description="no API keys at all (local development only: the service then "
                    "refuses to bind anything but a loopback address)")
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["localhost", "127.0.0.1", "[::1]"], min_length=1,
        max_length=100,
        description="Host header values the service answers (comma-separated; '*.example.com' "
                    "patterns; '*' allows any); the bind host is added. Others get 400, so "
                    "that a DNS-rebinding page cannot reach a local service")

    host_cpu: Optional[str] = Field(
        default=None, max_length=64, pattern=r"^[A-Za-z0-9_.-]*$",
        description="LLVM CPU name (-mcpu) that 'llvm' targets take as this host's, with "
                    "LLVM's features for it (e.g. haswell: AVX2 code on an AVX-512 host, as "
                    "`make test-avx2` runs the tests); this host's CPU must have every ISA "
                    "extension its code uses. Unset: detected")
    ray_address: Optional[str] = Field(
        default=None,
        description="address (HOST:PORT) of a Ray cluster to measure on; unset: measure "
                    "on this host")

    # Job threads, executors and generated code (`autotune.service.manager`, `.sources`).
    job_db_retry_s: float = Field(
        default=300.0, ge=0.0, le=86_400.0,
        description="seconds a job retries database errors (a lock held, a lost connection), "
                    "with backoff, resuming from its recorded trials; then it fails with the "
                    "error")
    executor_idle_s: float = Field(
        default=600.0, ge=1.0, le=604_800.0,
        description="seconds a target's executor (build pool and runner processes) stays open "
                    "with no job using it; then it is closed (made again when needed)")
    build_workers: int = Field(
        default=0, ge=0, le=256,
        description="worker processes compile_model builds a model's CPU kernels in "
                    "(0: one per core; 1: in the calling process)")
    source_workers: int = Field(
        default=1, ge=1, le=16,
        description="worker processes that generate code for /jobs/{id}/top "
                    "(at the lowest CPU priority)")
    source_timeout_s: float = Field(
        default=10.0, ge=0.001, le=600.0,
        description="seconds a /top request waits for generated code; then that config's "
                    "source_error says so (the code is still made and cached)")

    # Request limits of the service (a client beyond them gets a 413 or 429 with the reason).
    max_body_bytes: int = Field(
        default=1 << 20, ge=1024, le=1 << 30,
        description="largest request body accepted, in bytes (413 beyond; checked on the "
                    "Content-Length header and while a streamed body is read)")
    max_queued_jobs: int = Field(
        default=100, ge=1, le=100_000,
        description="jobs that may wait in the queue (state 'queued'); a submit beyond is 429")
    max_event_streams: int = Field(
        default=256, ge=1, le=10_000,
        description="event streams (/jobs/{id}/events) open at once, "
                    "all clients together; 429 beyond")
    max_event_streams_per_client: int = Field(
        default=16, ge=1, le=10_000,
        description="event streams open at once from one client address; 429 beyond")
    event_stream_lifetime_s: float = Field(
        default=900.0, ge=1.0, le=86_400.0,
        description="seconds an event stream stays open; then it closes and the client "
                    "reconnects with Last-Event-ID (browsers do so by themselves)")

    # Measurement (the timing protocol, docs/architecture.md): defaults as MeasureOptions',
    # bounds as every job's (`autotune.job_options.MEASURE_BOUNDS`).
    repeat: int = _measure_field("repeat", 5)
    number: int = _measure_field("number", 1)
    min_repeat_ms: float = _measure_field("min_repeat_ms", 20.0)
    build_timeout: float = _measure_field("build_timeout", 10.0)
    run_timeout: float = _measure_field("run_timeout", 10.0)

    @field_validator("host_cpu")
    @classmethod
    def _empty_is_unset(cls, value: Optional[str]) -> Optional[str]:
        return value or None

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _split_hosts(cls, value: Any) -> Any:
        # The environment gives one string: "a.example.com, b.example.com".
        if isinstance(value, str):
            return [host.strip() for host in value.split(",") if host.strip()]
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _check_hosts(cls, value: list[str]) -> list[str]:
        for host in value:
            if "*" in host[1:] or (host.startswith("*") and host != "*"
                                   and not host.startswith("*.")):
                raise ValueError(f"{host!r}: a wildcard must be '*' or lead as in "
                                 "'*.example.com'")
        return value

    def trusted_hosts(self) -> list[str]:
        """``allowed_hosts`` plus the bind host (unless that is a wildcard address)."""
        bind = f"[{self.host}]" if ":" in self.host else self.host
        wildcard = bind in ("0.0.0.0", "[::]", "")
        return list(dict.fromkeys([*self.allowed_hosts, *([] if wildcard else [bind.lower()])]))

