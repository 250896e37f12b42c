"""Engines, the session and connection helpers that turn database errors into StoreError, schema
checks.

SQLite gets WAL and a busy timeout on every connection; any other SQLAlchemy URL (PostgreSQL
for many workers) is used as given. Alembic is imported only by `upgrade`.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    Column,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    create_engine,
    event,
    inspect,
    text,
)
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.schema import CreateIndex, CreateTable

from .._errors import StoreError
from .driver import DriverError, DriverIntegrityError, Statements, transaction
from .models import SCHEMA_REVISION, VERSION_TABLE, Base

__all__ = ["close_engines", "close_every", "connection_scope", "create_current", "create_tables",
           "engine_for", "once_more_on_conflict", "per_file", "require_current", "revision_of",
           "session_scope", "statements_scope", "upgrade", "version_table", "write_locked"]

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
RACE_WAITS = 100  # x 50 ms: how long a creation that lost a race waits for the winner's


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    # switching a new file to WAL answers "locked" at once, busy handler or not, while another
    # process switches it too: retry for as long as the busy timeout allows
    for attempt in range(BUSY_TIMEOUT_MS // 10):
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError:
            if attempt == BUSY_TIMEOUT_MS // 10 - 1:
                raise
            time.sleep(0.01)
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


PER_FILE_KEPT = 8  # databases whose engine (and Optuna storage) one process keeps open
_ENGINES: OrderedDict[str, tuple[tuple[int, int] | None, Any]] = OrderedDict()


@lru_cache(maxsize=64)
def sqlite_path(url: str) -> str | None:
    """The file behind a SQLite URL (None: another database, or SQLite in memory)."""
    try:
        u = make_url(url)
    except (ValueError, ArgumentError):
        return None
    return u.database if u.get_backend_name() == "sqlite" and u.database not in (
        None, "", ":memory:") else None


def file_identity(url: str) -> tuple[int, int] | None:
    """(device, inode) of a SQLite URL's file; None when it has none."""
    path = sqlite_path(url)
    try:
        st = os.stat(path) if path is not None else None
    except (OSError, ValueError):
        return None
    return None if st is None else (st.st_dev, st.st_ino)


def per_file(cache: OrderedDict[str, tuple[tuple[int, int] | None, T]], url: str,
             make: Callable[[], T], close: Callable[[T], None]) -> T:
    """One `make()` per URL and process, made again when a SQLite file was deleted or
    replaced since (pooled connections to a deleted file would go on writing into it, and
    every record written there would be lost); the least recently used beyond
    `PER_FILE_KEPT` are closed, so a notebook going through many databases keeps no files
    open for ever. Thread-safe: sweeps in two threads of one process share the cache."""
    with _PER_FILE_LOCK:
        ident = file_identity(url)
        known = cache.pop(url, None)
        if known is not None:
            was, obj = known
            if was == ident:
                cache[url] = known
                return obj
            close(obj)
        obj = make()
        cache[url] = (ident, obj)
        while len(cache) > PER_FILE_KEPT:
            close(cache.popitem(last=False)[1][1])
        return obj


_PER_FILE_LOCK = threading.RLock()


def close_every(cache: OrderedDict[str, tuple[tuple[int, int] | None, T]],
                close: Callable[[T], None]) -> None:
    """Close what `per_file` keeps in `cache` (a process about to end: SQLite then folds its
    write-ahead log into the file and removes it, as at any last close)."""
    with _PER_FILE_LOCK:
        while cache:
            close(cache.popitem()[1][1])


def _close_engine(engine: Engine) -> None:
    engine.dispose()


def close_engines() -> None:
    close_every(_ENGINES, _close_engine)


def _new_engine(url: str) -> Engine:
    try:
        engine = create_engine(url, future=True)
    except (SQLAlchemyError, ValueError, ImportError) as e:
        raise StoreError(f"cannot open database {url!r}: {e}") from e
    if engine.dialect.name == "sqlite":
        if sqlite_path(url) is None:
            engine.dispose()
            raise StoreError(f"database {url}: SQLite in memory is not supported (each "
                             "connection, Optuna's among them, would see a database of its "
                             "own, and the records would be gone when the process ends): "
                             "give a file, e.g. sqlite:///arbiter.db")
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def engine_for(url: str) -> Engine:
    path = sqlite_path(url)
    if path is not None and not os.path.exists(path):
        # made here (empty: SQLite's empty database), so the engine is known to be this file's
        try:
            open(path, "ab").close()
        except (OSError, ValueError) as e:
            raise StoreError(f"cannot open database {url!r}: {e}") from e
    return per_file(_ENGINES, url, lambda: _new_engine(url), _close_engine)


def _store_error(url: str, e: SQLAlchemyError | DriverError) -> StoreError:
    return StoreError(f"database {url}: {type(e).__name__}: {e.args[0] if e.args else e}")


@contextlib.contextmanager
def session_scope(url: str) -> Iterator[Session]:
    """A session committed on success, rolled back on error; DB errors become StoreError."""
    session = Session(engine_for(url), expire_on_commit=False)
    try:
        yield session
        session.commit()
    except SQLAlchemyError as e:
        session.rollback()
        raise _store_error(url, e) from e
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


@contextlib.contextmanager
def connection_scope(url: str) -> Iterator[Connection]:
    """`session_scope` without the ORM, for the writes on the path between trials (a session's
    unit of work costs more than the two or three statements it sends)."""
    try:
        with engine_for(url).begin() as conn:
            yield conn
    except SQLAlchemyError as e:
        raise _store_error(url, e) from e


@contextlib.contextmanager
def statements_scope(url: str) -> Iterator[Statements]:
    """`connection_scope` for `Statements`: on SQLite, the driver's cursor (`driver`)."""
    try:
        with transaction(engine_for(url)) as run:
            yield run
    except (SQLAlchemyError, DriverError) as e:
        raise _store_error(url, e) from e


def once_more_on_conflict(fn: Callable[[], T]) -> T:
    """`fn()`, run again when another process inserted the same unique row first (two sweeps
    starting on one database at once): the second run finds the row."""
    try:
        return fn()
    except StoreError as e:
        if not isinstance(e.__cause__, (IntegrityError, DriverIntegrityError)):
            raise
    return fn()


@cache
def version_table(name: str) -> Table:
    """An Alembic version table as Alembic makes it: one row, the revision stamped. (Made
    once: a new table's first statements cost ~2 ms of SQLAlchemy's set-up.)"""
    return Table(name, MetaData(), Column("version_num", String(32), nullable=False),
                 PrimaryKeyConstraint("version_num", name=f"{name}_pkc"))


def _revision(conn: Connection) -> str | None:
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def revision_of(url: str) -> str | None:
    """Our schema revision in the database; None when it holds no Arbiter tables yet."""
    try:
        with engine_for(url).connect() as conn:
            return _revision(conn)
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read database {url}: {e}") from e


def require_current(url: str, *, create: bool = True) -> None:
    """Create a fresh database at the current schema; refuse an older or newer one."""
    path = sqlite_path(url)
    if not create and path is not None and not os.path.exists(path):  # (not made empty here)
        raise StoreError(f"database {url}: no such file (run `arbiter tune` first)")
    rev = revision_of(url)
    if rev == SCHEMA_REVISION:
        return
    if rev is None:
        if not create:
            raise StoreError(f"database {url} holds no Arbiter records (run `arbiter tune` first)")
        create_current(url)
        return
    if rev < SCHEMA_REVISION:
        raise StoreError(f"database {url} is at schema {rev}, this arbiter needs "
                         f"{SCHEMA_REVISION}: run `arbiter db upgrade --db {url}`")
    raise StoreError(f"database {url} is at schema {rev}, newer than this arbiter "
                     f"({SCHEMA_REVISION}): upgrade arbiter")


@contextlib.contextmanager
def write_locked(engine: Engine) -> Iterator[Connection]:
    """A connection in one write transaction, committed on success. On SQLite it begins
    IMMEDIATE: the write lock first (waited for up to the busy timeout), so what is read in
    it stays true until the commit, and DDL is inside it too (the driver's own transactions
    leave each CREATE to commit on its own)."""
    if engine.dialect.name != "sqlite":
        with engine.begin() as conn:
            yield conn
        return
    with engine.connect() as conn:
        conn = conn.execution_options(isolation_level="AUTOCOMMIT")  # our BEGIN, our COMMIT
        conn.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.exec_driver_sql("ROLLBACK")
            raise
        conn.exec_driver_sql("COMMIT")


_DDL: dict[tuple[Any, ...], list[tuple[str, list[str]]]] = {}


def _ddl(dialect: Any, metadata: MetaData) -> list[tuple[str, list[str]]]:
    """`create_all`'s statements for `metadata`'s tables, compiled once per kind of dialect
    (compiling them was most of a new file's ~15 ms schema): each table's name, its CREATE
    TABLE and CREATE INDEXes, in dependency order."""
    key = (type(dialect), dialect.server_version_info, metadata)
    known = _DDL.get(key)
    if known is None:
        known = _DDL[key] = [
            (t.name, [str(CreateTable(t).compile(dialect=dialect)),
                      *(str(CreateIndex(ix).compile(dialect=dialect))
                        for ix in sorted(t.indexes, key=lambda ix: ix.name or ""))])
            for t in metadata.sorted_tables]
    return known


def create_tables(conn: Connection, metadata: MetaData) -> None:
    """`metadata.create_all(conn)`: the tables not there yet, with their indexes."""
    existing = set(inspect(conn).get_table_names())
    for name, statements in _ddl(conn.dialect, metadata):
        if name not in existing:  # (create_all's check)
            for sql in statements:
                conn.exec_driver_sql(sql)


def create_current(url: str) -> None:
    """An empty database straight at the head schema: the models' tables, stamped with the
    head revision in Alembic's version table (Alembic's "create_all, then stamp" recipe).
    Replaying every migration instead costs ~0.1 s at the first `tune` against a new file; a
    test holds the models and the migrations to the same schema."""
    version = version_table(VERSION_TABLE)
    try:
        with write_locked(engine_for(url)) as conn:
            if _revision(conn) is not None:  # read again under the lock: made meanwhile
                return
            create_tables(conn, Base.metadata)
            version.create(conn, checkfirst=True)
            conn.execute(version.insert().values(version_num=SCHEMA_REVISION))
    except SQLAlchemyError as e:
        # several processes creating one database at once (without SQLite's write lock): all
        # but one fail here, and the winner's stamp comes
        for _ in range(RACE_WAITS):
            if revision_of(url) == SCHEMA_REVISION:
                return
            time.sleep(0.05)
        raise StoreError(f"cannot create database {url}: {e}") from e


def alembic_config(url: str):
    from alembic.config import Config

    import arbiter.db

    here = Path(arbiter.db.__file__).parent
    cfg = Config(str(here / "alembic.ini"))
    cfg.set_main_option("script_location", str(here))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> tuple[str | None, str | None]:
    """Migrate the database to `revision`; returns (before, after)."""
    from alembic import command

    before = revision_of(url)
    cfg = alembic_config(url)
    try:
        with engine_for(url).begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    except SQLAlchemyError as e:
        raise StoreError(f"database {url}: upgrade failed: {e}") from e
    return before, revision_of(url)
