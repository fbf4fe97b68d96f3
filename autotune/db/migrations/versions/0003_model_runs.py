"""Model runs: the model_runs table and jobs.model_run_id.

Revision ID: 0003
Revises: 0002
Create Date: 2025-02-10
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# Frozen copies of the column types as of this revision (see 0001).
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Stamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "model_runs",
        sa.Column("id", Id, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("target_id", Id, sa.ForeignKey("targets.id", name="fk_model_runs_target_id"),
                  nullable=False),
        sa.Column("budget", sa.Integer(), nullable=False),
        sa.Column("trials_done", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("tasks", sa.JSON(), nullable=False),
        sa.Column("unsupported", sa.JSON(), nullable=False),
        sa.Column("history", sa.JSON(), nullable=False),
        sa.Column("estimated_latency_s", sa.Float(), nullable=True),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", Stamp, nullable=False),
        sa.Column("updated_at", Stamp, nullable=False),
        sa.Column("finished_at", Stamp, nullable=True),
    )
    op.create_index("ix_model_runs_fingerprint", "model_runs", ["fingerprint"])
    op.create_index("ix_model_runs_target_id", "model_runs", ["target_id"])
    op.create_index("ix_model_runs_state", "model_runs", ["state"])
    # Nullable: existing jobs are standalone. No foreign key (see JobRow.model_run_id):
    # SQLite would rebuild jobs to add one. A plain column is added in place everywhere.
    op.add_column("jobs", sa.Column("model_run_id", Id, nullable=True))
    op.create_index("ix_jobs_model_run_id", "jobs", ["model_run_id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_model_run_id", "jobs")
    # In place (SQLite >= 3.35 drops a plain column itself): a batch rebuild of jobs would
    # drop the old table, and ON DELETE SET NULL would clear every trials.job_id.
    op.drop_column("jobs", "model_run_id")
    op.drop_index("ix_model_runs_state", "model_runs")
    op.drop_index("ix_model_runs_target_id", "model_runs")
    op.drop_index("ix_model_runs_fingerprint", "model_runs")
    op.drop_table("model_runs")
