"""Alembic environment: batch mode (SQLite ALTER), our own version table beside Optuna's."""

from __future__ import annotations

from typing import cast

from alembic import context
from sqlalchemy import create_engine

import arbiter.records._jobs  # noqa: F401  (the work queue's tables)
from arbiter.records._models import VERSION_TABLE, Base

config = context.config
target_metadata = Base.metadata


def _configure(connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata,
                      render_as_batch=True, version_table=VERSION_TABLE,
                      include_name=lambda name, type_, parent: type_ != "table"
                      or name in target_metadata.tables)


def run() -> None:
    conn = config.attributes.get("connection")
    if conn is not None:
        _configure(conn)
        with context.begin_transaction():
            context.run_migrations()
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option(
        "sqlalchemy.url")
    if context.is_offline_mode():
        context.configure(url=url, target_metadata=target_metadata, render_as_batch=True,
                          version_table=VERSION_TABLE, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(cast(str, url))  # cast: alembic.ini always sets sqlalchemy.url
    with engine.begin() as connection:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()


run()
