"""Re-timed figures kept apart from first measurements: trials.retimed_cost.

Until now the final re-timing pooled a record's re-timed repeats with its first ones into
one median. Records re-timed that way kept their first repeats in ``extra["first_costs"]``:
their ``costs``, ``cost`` and ``gflops`` are restored to those, since a pooled median of two
timing windows describes neither (none of them gets a ``retimed_cost``: no window compared
them alone).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25
"""
from __future__ import annotations

import statistics

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# Frozen copy of the columns this revision reads and writes.
_trials = sa.table("trials", sa.column("id", sa.BigInteger()), sa.column("costs", sa.JSON()),
                   sa.column("cost", sa.Float()), sa.column("gflops", sa.Float()),
                   sa.column("extra", sa.JSON()), sa.column("error", sa.String(32)))


def upgrade() -> None:
    # Nullable, no default: a plain column is added in place on SQLite and PostgreSQL.
    op.add_column("trials", sa.Column("retimed_cost", sa.Float(), nullable=True))
    _unpool(op.get_bind())


def _unpool(conn: sa.Connection) -> None:
    """Restore the first repeats of records whose costs were pooled with a re-timing."""
    pooled = sa.cast(_trials.c.extra, sa.Text()).like('%"first_costs"%')
    rows = conn.execute(sa.select(_trials.c.id, _trials.c.cost, _trials.c.gflops,
                                  _trials.c.extra, _trials.c.error).where(pooled)).all()
    for row_id, cost, gflops, extra, error in rows:
        first = (extra or {}).get("first_costs")
        if not isinstance(first, list) or not first or error != "none":
            continue
        try:
            costs = [float(c) for c in first]
        except (TypeError, ValueError):
            continue
        if not all(c > 0 for c in costs):
            continue
        new_cost = statistics.median(costs)
        # gflops = flops / cost / 1e9, so the workload's FLOPs need not be parsed here
        new_gflops = gflops * cost / new_cost if gflops and cost else None
        conn.execute(sa.update(_trials).where(_trials.c.id == row_id)
                     .values(costs=costs, cost=new_cost, gflops=new_gflops))


def downgrade() -> None:
    op.drop_column("trials", "retimed_cost")
