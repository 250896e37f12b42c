"""The work queue for many workers on one database: jobs, their regions, per-environment
tasks and the region leases workers hold while they sweep.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _fk(table: str, ondelete: str = "CASCADE", nullable: bool = False) -> sa.Column:
    return sa.Column(f"{table[:-1]}_id", sa.Integer,
                     sa.ForeignKey(f"{table}.id", ondelete=ondelete), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("options", sa.Text, nullable=False),
        sa.Column("source", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "job_regions",
        sa.Column("id", sa.Integer, primary_key=True),
        _fk("jobs"), _fk("regions"),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("table", sa.Text, nullable=False),
        sa.UniqueConstraint("job_id", "region_id", name="uq_job_regions_identity"),
    )
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer, primary_key=True),
        _fk("jobs"), _fk("regions"), _fk("environments"),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("worker", sa.String(255), nullable=False),
        sa.Column("lanes", sa.Text, nullable=False),
        sa.Column("row", sa.Text, nullable=False),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("finished_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("job_id", "region_id", "environment_id", name="uq_tasks_identity"),
    )
    op.create_table(
        "leases",
        sa.Column("id", sa.Integer, primary_key=True),
        _fk("regions"), _fk("environments"),
        sa.Column("holder", sa.String(255), nullable=True),
        _fk("jobs", "SET NULL", nullable=True),
        sa.Column("heartbeat_at", sa.DateTime, nullable=True),
        sa.Column("taken_at", sa.DateTime, nullable=True),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("takeovers", sa.Integer, nullable=False),
        sa.UniqueConstraint("region_id", "environment_id", name="uq_leases_identity"),
    )


def downgrade() -> None:
    for table in ("leases", "tasks", "job_regions", "jobs"):
        op.drop_table(table)
