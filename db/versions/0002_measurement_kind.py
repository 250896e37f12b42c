"""Measurements say what they are: the sweep's, the finalists' interleaved re-timing, or a
re-verification of a winner recorded on another machine. Existing rows were sweep results.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("kind", sa.String(16), nullable=False,
                                   server_default="sweep"))


def downgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("kind")
