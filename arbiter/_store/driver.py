"""Statements run on SQLite's own cursor, as SQLAlchemy compiles them for the dialect.

On the path between trials a statement's run through SQLAlchemy's execution layer costs 3-5
times what SQLite takes for it, and its connection and transaction objects as much again.
There, on SQLite, the few statements of a record and of the database study's writes are
compiled once per kind of dialect by SQLAlchemy itself (so their text follows the models),
and run on the driver's cursor of a pooled connection, in a transaction of the driver's own
(`driver_transaction`); their values get the conversions SQLAlchemy's types would give them
(dates, enums). Elsewhere (PostgreSQL) SQLAlchemy runs them (`Statements` does either).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DriverError", "DriverIntegrityError", "DriverSQL", "Statements", "by_driver",
           "compiled", "driver_transaction", "transaction"]

DriverError = sqlite3.Error  # what the driver raises: the callers' to turn into their errors
DriverIntegrityError = sqlite3.IntegrityError


@dataclass(frozen=True)
class DriverSQL:
    """A statement as SQLAlchemy compiled it: its text, its parameters in order, and the
    conversions of their values."""

    text: str
    names: tuple[str, ...]
    convert: dict[str, Any]

    def values(self, given: dict[str, Any]) -> list[Any]:
        return [self.convert[n](given[n]) if n in self.convert else given[n]
                for n in self.names]

    def run(self, cur: Any, given: dict[str, Any]) -> Any:
        return cur.execute(self.text, self.values(given))

    def run_many(self, cur: Any, rows: Iterable[dict[str, Any]]) -> None:
        cur.executemany(self.text, [self.values(r) for r in rows])


_COMPILED: dict[tuple[Any, ...], DriverSQL] = {}


def compiled(name: str, statement: Any, table: Any, dialect: Any,
             keys: Sequence[str]) -> DriverSQL:
    """`statement` (known to the caller as `name`) compiled for `dialect` with the columns
    `keys` given (`table`'s types convert their values), once per kind of dialect. Raises
    KeyError when SQLAlchemy would add parameters of its own (a column's default)."""
    key = (name, type(dialect), dialect.paramstyle, dialect.insert_returning, tuple(keys))
    known = _COMPILED.get(key)
    if known is None:
        c = statement.compile(dialect=dialect, column_keys=list(keys))
        names = tuple(c.positiontup or ())
        if not set(names) <= set(keys):
            raise KeyError(f"{name}: parameters {sorted(set(names) - set(keys))} not given")
        convert = {n: f for n in names if n in table.c and (
            f := table.c[n].type.dialect_impl(dialect).bind_processor(dialect)) is not None}
        known = _COMPILED[key] = DriverSQL(str(c), names, convert)
    return known


def by_driver(conn: Any) -> bool:
    """Are the statements of `conn` (a connection or an engine) run on the driver's cursor
    (the standard library's sqlite3, whose errors are `DriverError`, with RETURNING)?"""
    return bool(conn.dialect.name == "sqlite" and conn.dialect.driver == "pysqlite"
                and conn.dialect.insert_returning)


@contextlib.contextmanager
def driver_transaction(engine: Any) -> Iterator[Any]:
    """A cursor on one of `engine`'s pooled connections, its writes committed on success and
    rolled back on error: `engine.begin()` without SQLAlchemy's connection and transaction
    objects. As there, the driver begins the transaction at the first write (a read before it
    sees the latest commits). Raises `DriverError`; the pool's connect, SQLAlchemy's errors."""
    raw = engine.raw_connection()
    try:
        db = raw.driver_connection
        cur = db.cursor()
        try:
            yield cur
            db.commit()
        except BaseException:
            db.rollback()
            raise
        finally:
            cur.close()
    finally:
        raw.close()


class Statements:
    """One transaction's statements: on the driver's cursor, compiled once (`compiled`), or
    through SQLAlchemy's connection. Each is named by the caller, for `compiled`'s cache."""

    def __init__(self, on: Any, dialect: Any, driver: bool) -> None:
        self.on, self.dialect, self.driver = on, dialect, driver

    def rows(self, name: str, statement: Any, table: Any,
             given: dict[str, Any]) -> list[tuple[Any, ...]]:
        if self.driver:
            sql = compiled(name, statement, table, self.dialect, list(given))
            return sql.run(self.on, given).fetchall()
        return [tuple(r) for r in self.on.execute(statement, given)]

    def many(self, name: str, statement: Any, table: Any, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        if self.driver:
            compiled(name, statement, table, self.dialect, list(rows[0])).run_many(self.on, rows)
        else:
            self.on.execute(statement, rows)

    def added(self, name: str, insert: Any, table: Any,
              rows: list[dict[str, Any]]) -> list[int]:
        """Insert `rows`, in order; their new ids. One by one on the driver's cursor (a
        row's id is its last row id); elsewhere in one statement returning them where the
        dialect sorts those by the rows, else one by one."""
        if self.driver:
            sql = compiled(name, insert, table, self.dialect, list(rows[0]))
            return [sql.run(self.on, row).lastrowid for row in rows]
        if len(rows) > 1 and getattr(self.dialect,
                                     "insert_executemany_returning_sort_by_parameter_order",
                                     False):
            key = next(c for c in table.primary_key.columns)
            return list(self.on.execute(insert.returning(key, sort_by_parameter_order=True),
                                        rows).scalars())
        return [self.on.execute(insert, row).inserted_primary_key[0] for row in rows]


@contextlib.contextmanager
def transaction(engine: Any) -> Iterator[Statements]:
    """`Statements` in one transaction on `engine`, committed on success: on the driver's
    cursor where `by_driver`, else SQLAlchemy's `engine.begin()`."""
    if by_driver(engine):
        with driver_transaction(engine) as cur:
            yield Statements(cur, engine.dialect, True)
    else:
        with engine.begin() as conn:
            yield Statements(conn, engine.dialect, False)
