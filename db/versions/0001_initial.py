"""Initial record store: regions, environments, lanes, candidates, measurements, winners.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "regions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("key", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("canonical", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("key", name="uq_regions_key"),
    )
    op.create_table(
        "environments",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("details", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("fingerprint", name="uq_environments_fingerprint"),
    )
    op.create_table(
        "lanes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("platform", sa.String(16), nullable=False),
        sa.UniqueConstraint("name", "version", name="uq_lanes_name_version"),
    )
    op.create_table(
        "candidates",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("region_id", sa.Integer,
                  sa.ForeignKey("regions.id", ondelete="CASCADE"), nullable=False),
        sa.Column("environment_id", sa.Integer,
                  sa.ForeignKey("environments.id", ondelete="CASCADE"), nullable=False),
        sa.Column("lane_id", sa.Integer,
                  sa.ForeignKey("lanes.id", ondelete="CASCADE"), nullable=False),
        sa.Column("config_key", sa.String(32), nullable=False),
        sa.Column("config", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("region_id", "environment_id", "lane_id", "config_key",
                            name="uq_candidates_identity"),
    )
    op.create_index("ix_candidates_region_environment", "candidates",
                    ["region_id", "environment_id"])
    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("candidate_id", sa.Integer,
                  sa.ForeignKey("candidates.id", ondelete="CASCADE"), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("budget", sa.Float, nullable=False),
        sa.Column("rel_error", sa.Float),
        sa.Column("max_abs", sa.Float),
        sa.Column("median", sa.Float),
        sa.Column("spread", sa.Float),
        sa.Column("samples", sa.Text, nullable=False),
        sa.Column("timing_method", sa.String(64), nullable=False),
        sa.Column("compile_seconds", sa.Float, nullable=False),
        sa.Column("log", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_index("ix_measurements_candidate", "measurements", ["candidate_id"])
    op.create_table(
        "winners",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("region_id", sa.Integer,
                  sa.ForeignKey("regions.id", ondelete="CASCADE"), nullable=False),
        sa.Column("environment_id", sa.Integer,
                  sa.ForeignKey("environments.id", ondelete="CASCADE"), nullable=False),
        sa.Column("budget", sa.Float, nullable=False),
        sa.Column("candidate_id", sa.Integer,
                  sa.ForeignKey("candidates.id", ondelete="CASCADE"), nullable=False),
        sa.Column("runner_up_id", sa.Integer,
                  sa.ForeignKey("candidates.id", ondelete="SET NULL")),
        sa.Column("median", sa.Float),
        sa.Column("spread", sa.Float),
        sa.Column("rel_error", sa.Float),
        sa.Column("margin", sa.Float),
        sa.Column("tie", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("region_id", "environment_id", "budget",
                            name="uq_winners_identity"),
    )


def downgrade() -> None:
    for table in ("winners", "measurements", "candidates", "lanes", "environments", "regions"):
        op.drop_table(table)
