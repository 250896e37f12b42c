"""Measurements record what their build uses on its target (for gfx builds: VGPRs, SGPRs,
LDS, scratch, waves per SIMD) as JSON; older rows have none (NULL).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("resources", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("resources")
