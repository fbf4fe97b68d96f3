"""``Database``: the tuning database, its stores by concern joined: `RecordStore` (trials and
bests) and `JobStore` (jobs, leases, API keys), over one engine (`Store`)."""
from __future__ import annotations

from autotune.db.job_store import JobStore
from autotune.db.record_store import RecordStore


class Database(RecordStore, JobStore):
    """A tuning database at ``url`` (default: ``Settings().db_url``, read at construction;
    a SQLite file unless set; ``postgresql+psycopg://`` at scale).

    Constructing connects lazily and changes nothing; ``upgrade()`` (or ``Database.open``)
    brings the schema to the newest migration. Code that needs one concern takes its store.
    """
