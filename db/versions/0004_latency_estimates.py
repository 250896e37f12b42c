"""Latencies are the round-minimum estimator with an interval, measurements record the load
they were taken under, and winners record how their runner-up was told apart (verdict, ratio
and its interval, the equivalence band). Existing rows keep their medians as latencies,
without intervals; their winners' verdicts are `tie` where they were declared ties, else
unknown (NULL).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_ESTIMATE = ("latency", "latency_low", "latency_high")


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        for name in _ESTIMATE:
            batch.add_column(sa.Column(name, sa.Float, nullable=True))
        batch.add_column(sa.Column("unstable", sa.Boolean, nullable=False,
                                   server_default=sa.false()))
        batch.add_column(sa.Column("load", sa.Float, nullable=True))
    op.execute("UPDATE measurements SET latency = median")
    with op.batch_alter_table("winners") as batch:
        batch.alter_column("median", new_column_name="latency")
        for name in _ESTIMATE[1:] + ("ratio", "ratio_low", "ratio_high", "band", "load"):
            batch.add_column(sa.Column(name, sa.Float, nullable=True))
        batch.add_column(sa.Column("verdict", sa.String(16), nullable=True))
        batch.add_column(sa.Column("unstable", sa.Boolean, nullable=False,
                                   server_default=sa.false()))
    op.execute(sa.text("UPDATE winners SET verdict = 'tie' WHERE tie"))


def downgrade() -> None:
    with op.batch_alter_table("winners") as batch:
        for name in ("latency_low", "latency_high", "ratio", "ratio_low", "ratio_high", "band",
                     "load", "verdict", "unstable"):
            batch.drop_column(name)
        batch.alter_column("latency", new_column_name="median")
    with op.batch_alter_table("measurements") as batch:
        for name in (*_ESTIMATE, "unstable", "load"):
            batch.drop_column(name)
