"""Job leases: jobs.owner, jobs.lease_expires_at, jobs.waiting; trials.worker.

Revision ID: 0002
Revises: 0001
Create Date: 2025-01-20
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# Frozen copies of the column types as of this revision (see 0001).
Stamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    # Nullable columns only: existing rows need no values, and SQLite adds them in place.
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("owner", sa.String(200), nullable=True))
        batch.add_column(sa.Column("lease_expires_at", Stamp, nullable=True))
        batch.add_column(sa.Column("waiting", sa.Text(), nullable=True))
        batch.create_index("ix_jobs_owner", ["owner"])
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("worker", sa.String(200), nullable=True))
        batch.create_index("ix_trials_worker", ["worker"])


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_index("ix_trials_worker")
        batch.drop_column("worker")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_owner")
        batch.drop_column("waiting")
        batch.drop_column("lease_expires_at")
        batch.drop_column("owner")
