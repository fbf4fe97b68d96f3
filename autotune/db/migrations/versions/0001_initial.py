"""Initial schema: workloads, targets, jobs, trials, api_keys.

Revision ID: 0001
Revises:
Create Date: 2024-11-21
"""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# Frozen copies of the column types as of this revision: later edits to the ORM must not
# change what this migration creates.
Id = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Stamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "workloads",
        sa.Column("id", Id, primary_key=True),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("op", sa.String(64), nullable=False),
        sa.Column("created_at", Stamp, nullable=False),
        sa.UniqueConstraint("key", name="uq_workloads_key"),
    )
    op.create_index("ix_workloads_op", "workloads", ["op"])

    op.create_table(
        "targets",
        sa.Column("id", Id, primary_key=True),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.UniqueConstraint("key", name="uq_targets_key"),
    )
    op.create_index("ix_targets_kind", "targets", ["kind"])

    op.create_table(
        "jobs",
        sa.Column("id", Id, primary_key=True),
        sa.Column("workload_id", Id, sa.ForeignKey("workloads.id", name="fk_jobs_workload_id"),
                  nullable=False),
        sa.Column("target_id", Id, sa.ForeignKey("targets.id", name="fk_jobs_target_id"),
                  nullable=False),
        sa.Column("tuner", sa.String(32), nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("options", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("best_gflops", sa.Float(), nullable=True),
        sa.Column("trials_done", sa.Integer(), nullable=False),
        sa.Column("created_at", Stamp, nullable=False),
        sa.Column("started_at", Stamp, nullable=True),
        sa.Column("finished_at", Stamp, nullable=True),
        sa.Column("updated_at", Stamp, nullable=False),
    )
    op.create_index("ix_jobs_workload_id", "jobs", ["workload_id"])
    op.create_index("ix_jobs_target_id", "jobs", ["target_id"])
    op.create_index("ix_jobs_state", "jobs", ["state"])

    op.create_table(
        "trials",
        sa.Column("id", Id, primary_key=True),
        sa.Column("workload_id", Id, sa.ForeignKey("workloads.id", name="fk_trials_workload_id"),
                  nullable=False),
        sa.Column("target_id", Id, sa.ForeignKey("targets.id", name="fk_trials_target_id"),
                  nullable=False),
        sa.Column("job_id", Id,
                  sa.ForeignKey("jobs.id", name="fk_trials_job_id", ondelete="SET NULL"),
                  nullable=True),
        sa.Column("config_key", sa.String(64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("costs", sa.JSON(), nullable=False),
        sa.Column("cost", sa.Float(), nullable=True),
        sa.Column("gflops", sa.Float(), nullable=True),
        sa.Column("error", sa.String(32), nullable=False),
        sa.Column("error_msg", sa.Text(), nullable=False),
        sa.Column("build_s", sa.Float(), nullable=False),
        sa.Column("run_s", sa.Float(), nullable=False),
        sa.Column("timestamp", sa.Float(), nullable=False),
        sa.Column("extra", sa.JSON(), nullable=False),
        sa.Column("created_at", Stamp, nullable=False),
        sa.UniqueConstraint("workload_id", "target_id", "config_key", name="uq_trials_config"),
    )
    op.create_index("ix_trials_best", "trials", ["workload_id", "target_id", "error", "cost"])
    op.create_index("ix_trials_target_id", "trials", ["target_id"])
    op.create_index("ix_trials_job_id", "trials", ["job_id"])

    op.create_table(
        "api_keys",
        sa.Column("id", Id, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("created_at", Stamp, nullable=False),
        sa.Column("revoked", sa.Boolean(), nullable=False),
        sa.UniqueConstraint("key_hash", name="uq_api_keys_key_hash"),
    )
    op.create_index("ix_api_keys_prefix", "api_keys", ["prefix"])


def downgrade() -> None:
    op.drop_table("api_keys")
    op.drop_table("trials")
    op.drop_table("jobs")
    op.drop_table("targets")
    op.drop_table("workloads")
