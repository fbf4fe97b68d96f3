"""The current cost model's scores of a job's trials: jobs.model_scores.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: existing jobs have no scores. A plain column is added in place
    # on SQLite and PostgreSQL alike (no table rebuild).
    op.add_column("jobs", sa.Column("model_scores", sa.JSON(), nullable=True))


def downgrade() -> None:
    # In place (SQLite >= 3.35 drops a plain column itself): a batch rebuild of jobs would
    # drop the old table, and ON DELETE SET NULL would clear every trials.job_id.
    op.drop_column("jobs", "model_scores")
