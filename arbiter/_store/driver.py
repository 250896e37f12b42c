"""Statements run on SQLite's own cursor, as SQLAlchemy compiles them for the dialect.

On the path between trials a statement's run through SQLAlchemy's execution layer costs 3-5
times what SQLite takes for it. There, on SQLite, the few statements of a record and of the
database study's writes are compiled once per kind of dialect by SQLAlchemy itself (so their
text follows the models), and run on the connection's driver cursor, in the transaction
SQLAlchemy began; their values get the conversions SQLAlchemy's types would give them (dates,
enums). Elsewhere (PostgreSQL) SQLAlchemy runs them as before.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["DriverSQL", "by_driver", "compiled", "driver_cursor"]

DriverError = sqlite3.Error  # what the driver raises: the callers' to turn into their errors


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
             keys: list[str]) -> DriverSQL:
    """`statement` (known to the caller as `name`) compiled for `dialect` with the columns
    `keys` given (`table`'s types convert their values), once per kind of dialect. Raises
    KeyError when SQLAlchemy would add parameters of its own (a column's default)."""
    key = (name, type(dialect), dialect.paramstyle, dialect.insert_returning, tuple(keys))
    known = _COMPILED.get(key)
    if known is None:
        c = statement.compile(dialect=dialect, column_keys=keys)
        names = tuple(c.positiontup or ())
        if not set(names) <= set(keys):
            raise KeyError(f"{name}: parameters {sorted(set(names) - set(keys))} not given")
        convert = {n: f for n in names if n in table.c and (
            f := table.c[n].type.dialect_impl(dialect).bind_processor(dialect)) is not None}
        known = _COMPILED[key] = DriverSQL(str(c), names, convert)
    return known


def by_driver(conn: Any) -> bool:
    """Are `conn`'s statements run on the driver's cursor (the standard library's sqlite3,
    whose errors are `DriverError`, with RETURNING)?"""
    return bool(conn.dialect.name == "sqlite" and conn.dialect.driver == "pysqlite"
                and conn.dialect.insert_returning)


def driver_cursor(conn: Any) -> Any:
    return conn.connection.driver_connection.cursor()
