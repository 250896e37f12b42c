"""Engines, the one session helper that turns database errors into StoreError, and the schema:
created at the head on first use, refused (with the upgrade command) when older or newer.

SQLite gets WAL, a busy timeout and foreign keys on every connection; any other SQLAlchemy URL
(PostgreSQL for many workers) is used as given. Alembic is imported only by `upgrade`.

A SQLite file this process may not write (the file or its folder read-only to this user, a
read-only mount) is opened read-only: `best`, `run`, `report` and the service only read, and
never need write access; a write fails as the database's own error.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from .._errors import StoreError
from . import _jobs  # noqa: F401  (the work queue's tables, on Base.metadata)
from ._models import SCHEMA_REVISION, VERSION_TABLE, Base

__all__ = ["BUSY_TIMEOUT_MS", "alembic_config", "close_engines", "engine_for",
           "once_more_on_conflict", "one_name", "read_only", "require_current", "revision_of",
           "session_scope", "sqlite_path", "upgrade"]

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
KEPT = 8  # databases whose engine one process keeps open (a notebook going through many)


def sqlite_pragmas(dbapi_conn: Any, _record: Any = None) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    # switching a new file to WAL answers "locked" at once, busy handler or not, while another
    # process switches it too: retried for as long as the busy timeout allows
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


def reader_pragmas(dbapi_conn: Any, _record: Any = None) -> None:
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA query_only=ON")
    cur.close()


def _may_write(path: str) -> bool:
    """Can this process write the SQLite file at `path` and make its WAL files beside it?"""
    real = os.path.realpath(path)  # (SQLite names the WAL files after the file itself)
    return os.access(real, os.W_OK) and os.access(os.path.dirname(real), os.W_OK | os.X_OK)


def _read_only_connection(path: str) -> Callable[[], sqlite3.Connection]:
    """Connections to a file opened read-only. While another process has it open in WAL mode
    (its -shm or -wal beside it) they read through SQLite's shared memory, as any reader does;
    otherwise the file is read as it stands (`immutable`), making no file beside it (its
    folder may not be ours to write)."""
    real = Path(os.path.realpath(path))

    def connect() -> sqlite3.Connection:
        live = any(os.path.exists(f"{real}{s}") for s in ("-shm", "-wal"))
        query = "mode=ro" if live else "mode=ro&immutable=1"
        return sqlite3.connect(f"{real.as_uri()}?{query}", uri=True, check_same_thread=False)

    return connect


def sqlite_path(url: str) -> str | None:
    """The file behind a SQLite URL (None: another database, or SQLite in memory)."""
    try:
        u = make_url(url)
    except (ValueError, ArgumentError):
        return None
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        return None
    return u.database


def one_name(path: str | None, url: str) -> None:
    """Refuse a SQLite file reached by more than one hard link. SQLite keeps its write-ahead
    log beside the name a database is opened by (it resolves symlinks and `..`, but cannot
    know a file's other names): the last commits of a process killed while writing through
    one name are in that name's log, which a process opening another name neither sees nor
    replays, and which, replayed later through the first name, undoes what was written
    through the second."""
    try:
        st = os.stat(path) if path is not None else None
    except (OSError, ValueError):
        return
    if st is not None and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise StoreError(f"database {url}: the file has {st.st_nlink} names (hard links), and "
                         "SQLite keeps the last commits in a log named after the one it was "
                         "opened by, so records written through one name can be lost through "
                         "another: keep one name (remove the other links; a symlink is fine), "
                         "or copy the file")


def _identity(path: str | None) -> tuple[int, int] | None:
    try:
        st = os.stat(path) if path is not None else None
    except (OSError, ValueError):
        return None
    return None if st is None else (st.st_dev, st.st_ino)


_ENGINES: OrderedDict[str, tuple[tuple[int, int] | None, Engine, bool]] = OrderedDict()
_LOCK = threading.Lock()


def _new_engine(url: str) -> tuple[Engine, bool]:
    """The engine for `url`, and whether it only reads (a SQLite file this process may not
    write: each connection is opened read-only when it is needed, never pooled, so it sees
    the file as its writers left it)."""
    path = sqlite_path(url)
    reads_only = path is not None and not _may_write(path)
    try:
        # a server restarted (or a connection dropped) since a connection was pooled: the
        # ping finds it and opens another, instead of the next query failing
        remote = make_url(url).get_backend_name() != "sqlite"
        if reads_only:
            assert path is not None
            engine = create_engine(url, creator=_read_only_connection(path), poolclass=NullPool)
        else:
            engine = create_engine(url, pool_pre_ping=remote)
    except (SQLAlchemyError, ValueError, ImportError) as e:
        raise StoreError(f"cannot open database {url!r}: {e}") from e
    if engine.dialect.name == "sqlite":
        if path is None:
            engine.dispose()
            raise StoreError(f"database {url}: SQLite in memory is not supported (each "
                             "connection, Optuna's among them, would see a database of its "
                             "own, and the records would be gone when the process ends): "
                             "give a file, e.g. sqlite:///arbiter.db")
        event.listen(engine, "connect", reader_pragmas if reads_only else sqlite_pragmas)
    return engine, reads_only


def engine_for(url: str) -> Engine:
    """One engine per URL and process, made again when a SQLite file was deleted or replaced
    since (pooled connections to a deleted file would write into it, and the records would
    be lost); the least recently used beyond `KEPT` are closed."""
    path = sqlite_path(url)
    if path is not None and not os.path.exists(path):
        try:  # made here, so the engine is known to be this file's
            open(path, "ab").close()
        except (OSError, ValueError) as e:
            raise StoreError(f"cannot open database {url!r}: {e}") from e
    with _LOCK:
        ident = _identity(path)
        known = _ENGINES.pop(url, None)
        if known is not None and known[0] == ident:
            _ENGINES[url] = known
            return known[1]
        if known is not None:
            known[1].dispose()
        one_name(path, url)
        engine, reads_only = _new_engine(url)
        _ENGINES[url] = (ident, engine, reads_only)
        while len(_ENGINES) > KEPT:
            _ENGINES.popitem(last=False)[1][1].dispose()
        return engine


def read_only(url: str) -> bool:
    """Is the database at `url` opened read-only here (a SQLite file this process may not
    write)? Then a query is answered, and nothing is recorded."""
    engine_for(url)
    with _LOCK:
        known = _ENGINES.get(url)
    return known is not None and known[2]


def close_engines() -> None:
    with _LOCK:
        while _ENGINES:
            _ENGINES.popitem()[1][1].dispose()


def _store_error(url: str, e: SQLAlchemyError) -> StoreError:
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


def once_more_on_conflict(fn: Callable[[], T]) -> T:
    """`fn()`, run again when another process inserted the same unique row first (two sweeps
    starting on one database at once): the second run finds the row."""
    try:
        return fn()
    except StoreError as e:
        if not isinstance(e.__cause__, IntegrityError):
            raise
    return fn()


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
    if not create and path is not None and not os.path.exists(path):
        raise StoreError(f"database {url}: no such file (run `arbiter tune` first)")
    rev = revision_of(url)
    if rev == SCHEMA_REVISION:
        return
    if rev is None:
        if not create:
            raise StoreError(f"database {url} holds no Arbiter records (run `arbiter tune` first)")
        _create(url)
        return
    if rev < SCHEMA_REVISION:
        raise StoreError(f"database {url} is at schema {rev}, this arbiter needs "
                         f"{SCHEMA_REVISION}: run `arbiter db upgrade --db {url}`")
    raise StoreError(f"database {url} is at schema {rev}, newer than this arbiter "
                     f"({SCHEMA_REVISION}): upgrade arbiter")


def _create(url: str) -> None:
    """The models' tables, stamped with the head revision in our version table (Alembic's
    "create_all, then stamp" recipe). Processes creating one database at once: all but one
    fail on the other's rows, and wait for its stamp."""
    from sqlalchemy import Column, MetaData, String, Table

    version = Table(VERSION_TABLE, MetaData(), Column("version_num", String(32),
                                                      primary_key=True))
    try:
        with engine_for(url).begin() as conn:
            Base.metadata.create_all(conn)
            version.create(conn, checkfirst=True)
            conn.execute(version.insert().values(version_num=SCHEMA_REVISION))
    except SQLAlchemyError as e:
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1e3  # (a busy machine: seconds)
        while time.monotonic() < deadline:
            if revision_of(url) == SCHEMA_REVISION:
                return
            time.sleep(0.05)
        raise StoreError(f"cannot create database {url}: {e}") from e


def alembic_config(url: str) -> Any:
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
    from alembic.util import CommandError

    before = revision_of(url)
    cfg = alembic_config(url)
    try:
        with engine_for(url).begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)
    except SQLAlchemyError as e:
        raise StoreError(f"database {url}: upgrade failed: {e}") from e
    except CommandError as e:  # a revision none of ours: a newer arbiter wrote the database
        raise StoreError(f"database {url} is at schema {before}, which this arbiter (schema "
                         f"{SCHEMA_REVISION}) does not know: upgrade arbiter ({e})") from e
    return before, revision_of(url)
