"""Measurements record the memory limit the worker ran under (ARBITER_WORKER_MEMORY), so an
`out_of_memory` is measured again by a sweep that allows more, and not by one that allows the
same. Older ones get theirs from their logs, where the worker wrote it rounded to 0.01 GiB:
read as the most it can have been, so the same limit again does not count as more.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_LIMIT = re.compile(r"over its limit of ([0-9.]+) GiB")


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("memory_limit", sa.BigInteger, nullable=True))
    table = sa.table("measurements", sa.column("id", sa.Integer),
                     sa.column("status", sa.String), sa.column("log", sa.Text),
                     sa.column("memory_limit", sa.BigInteger))
    bind = op.get_bind()
    for row_id, log in bind.execute(sa.select(table.c.id, table.c.log).where(
            table.c.status == "out_of_memory")).all():
        found = _LIMIT.search(log or "")
        if found:
            limit = int((float(found.group(1)) + 0.005) * (1 << 30))
            bind.execute(table.update().where(table.c.id == row_id).values(memory_limit=limit))


def downgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("memory_limit")
