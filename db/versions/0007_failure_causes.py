"""Measurements record the timeout a candidate ran under and, for a failure the environment
caused (a full disk, a kill by someone else), its cause: a later sweep measures those again.
Older failures get theirs from their logs, where the worker and the compilers wrote them.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_TIMEOUT = re.compile(r"no result after ([0-9.eE+-]+) s")


def upgrade() -> None:
    from arbiter.lane import Status
    from arbiter.measure import environment_cause

    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("cause", sa.String(32), nullable=True))
        batch.add_column(sa.Column("timeout", sa.Float, nullable=True))
    table = sa.table("measurements", sa.column("id", sa.Integer), sa.column("status", sa.String),
                     sa.column("log", sa.Text), sa.column("cause", sa.String),
                     sa.column("timeout", sa.Float))
    bind = op.get_bind()
    failed = bind.execute(sa.select(table.c.id, table.c.status, table.c.log).where(
        table.c.status.in_(["compile_failed", "launch_failed", "crashed", "timeout"]))).all()
    for row_id, status, log in failed:
        log = log or ""
        seconds = _TIMEOUT.search(log) if status == "timeout" else None
        values = {"cause": environment_cause(Status(status), log),
                  "timeout": float(seconds.group(1)) if seconds else None}
        if any(v is not None for v in values.values()):
            bind.execute(table.update().where(table.c.id == row_id).values(**values))


def downgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.drop_column("timeout")
        batch.drop_column("cause")
