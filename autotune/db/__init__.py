"""The tuning database: SQLAlchemy tables, Alembic migrations, queries, JSON-lines import/export."""
from __future__ import annotations

from autotune.db.database import Database
from autotune.db.schema import JOB_STATES, TERMINAL_STATES
from autotune.db.trials import SORTS
from autotune.db.values import (
    ApiKeyRecord,
    ConfigLike,
    JobRecord,
    TargetLike,
    TrialRecord,
    WorkloadLike,
)

__all__ = [
    "JOB_STATES",
    "SORTS",
    "TERMINAL_STATES",
    "ApiKeyRecord",
    "ConfigLike",
    "Database",
    "JobRecord",
    "TargetLike",
    "TrialRecord",
    "WorkloadLike",
]
