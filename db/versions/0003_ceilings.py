"""Measured machine ceilings per environment (copy bandwidth, matmul rate) for roofline reports.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ceilings",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "environment_id",
            sa.Integer,
            sa.ForeignKey("environments.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("value", sa.Float, nullable=False),
        sa.Column("unit", sa.String(16), nullable=False),
        sa.Column("method", sa.String(255), nullable=False),
        sa.Column("measured_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("environment_id", "name", name="uq_ceilings_environment_name"),
    )


def downgrade() -> None:
    op.drop_table("ceilings")
