"""Optuna's storage on our database: its tables made and checked without its migration scripts.

Optuna's own first open of a file loads its 10 Alembic scripts three times (to find the head
revision, to stamp it, to check it: ~70 ms, once per new file, in a sweep's path) and once on
every later open. We make a new file's Optuna tables as `create_current` makes ours (Alembic's
"create_all, then stamp" recipe, at the head of Optuna's migrations), and check an existing
file's stamp against that head, loaded once per process. A file in any other state (Optuna's
tables without a stamp: made before Optuna used Alembic), and any file where Optuna's private
layout is not the one this was written against, is left to Optuna's own open.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlalchemy import inspect, text
from sqlalchemy.exc import SQLAlchemyError

from ._errors import StoreError
from ._store import engine_for
from ._store.session import (
    RACE_WAITS,
    _sqlite_pragmas,
    _store_error,
    close_every,
    create_tables,
    per_file,
    version_table,
    write_locked,
)

__all__ = ["close_storages", "load_soon", "opened_before", "storage_for"]

OPTUNA_VERSION_TABLE = "alembic_version"  # Optuna's Alembic table (ours has its own name)

_STORAGES: OrderedDict[str, tuple[Any, Any]] = OrderedDict()


@lru_cache(maxsize=1)
def optuna_head() -> str | None:
    """The head revision of Optuna's schema migrations (its scripts, loaded once per process);
    None where Optuna's private layout is not the one this was written against (its models,
    its scripts' folder): Optuna's own open then does all of it."""
    try:
        from alembic.script import ScriptDirectory
        from optuna.storages._rdb import models

        if not all(hasattr(models, n) for n in ("BaseModel", "VersionInfoModel",
                                                "SCHEMA_VERSION")):
            return None
        return ScriptDirectory(str(Path(models.__file__).parent / "alembic")).get_current_head()
    except Exception:  # noqa: BLE001  any mismatch: Optuna's own open
        return None


_LOADING: list[threading.Thread] = []


def _load() -> None:
    optuna_head()
    try:
        import optuna.storages  # noqa: F401  (RDBStorage's own modules)
    except Exception:  # noqa: BLE001, S110  the open reports it, in its own words
        pass


def load_soon() -> None:
    """Load Optuna's storage code (Alembic, Optuna's models, the head of its migrations: 0.1
    s on the H200 host, 0.4-0.6 s on 2 busy cores) in a thread, once per process, for the
    first open to come. That open runs in a worker window, or, after a result that dropped
    the proposal asked ahead, where the next candidate waits for it; loaded there, it
    outlasted the window's compile (its timing waited) or stalled that candidate. The thread
    runs while this process waits on the worker."""
    if not _LOADING and not _STORAGES:
        _LOADING.append(threading.Thread(target=_load, name="optuna-storage-load", daemon=True))
        _LOADING[0].start()


def _state(conn: Any) -> str | None | bool:
    """The revision Optuna's tables are stamped with; False when the file has no Optuna
    tables; None when it has them without a stamp."""
    if inspect(conn).has_table(OPTUNA_VERSION_TABLE):
        return conn.execute(text(f"SELECT version_num FROM {OPTUNA_VERSION_TABLE}")).scalar()
    return None if inspect(conn).has_table("studies") else False


def _create(conn: Any, head: str) -> None:
    import optuna
    from optuna.storages._rdb import models

    version = version_table(OPTUNA_VERSION_TABLE)
    create_tables(conn, models.BaseModel.metadata)
    conn.execute(models.VersionInfoModel.__table__.insert().values(
        version_info_id=1, schema_version=models.SCHEMA_VERSION,
        library_version=optuna.__version__))
    version.create(conn)
    conn.execute(version.insert().values(version_num=head))


def _made(engine: Any) -> str | None:
    """Make Optuna's tables in a file that has none, stamped at the head. Returns the file's
    stamp; None for a file whose Optuna tables predate Alembic, or with no head known
    (Optuna opens those itself).

    The tables, their indexes and the stamp are made in one write transaction: SQLite
    otherwise commits each CREATE on its own, and a sweep opening the file meanwhile would
    find Optuna's tables without their stamp, or without an index, and accept them. A sweep
    that waited for that transaction finds the stamp."""
    head = optuna_head()
    if head is None:
        return None
    with engine.connect() as conn:
        state = _state(conn)
    if isinstance(state, str):
        return state  # a stamp, once committed, stays
    if state is None and engine.dialect.name != "sqlite":
        return None  # DDL in a transaction there: tables without a stamp predate Alembic
    with write_locked(engine) as conn:  # elsewhere: a second creator's CREATE fails, retried
        # read again under the lock: on SQLite the reads above ran outside a transaction,
        # each on its own snapshot, so a creator's commit between them could read as tables
        # without a stamp
        state = _state(conn)
        if state is False:
            _create(conn, head)
            state = head
    return state if isinstance(state, str) else None


def _new_storage(url: str) -> Any:
    """Optuna's storage on `url`, its tables made or checked by `_made`; Optuna's own open for
    a file `_made` leaves to it."""
    import optuna
    from sqlalchemy import event
    from sqlalchemy.exc import IntegrityError, OperationalError

    kwargs = {"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {}
    for loading in _LOADING:
        loading.join()  # (its loads, not done twice)
    for attempt in range(RACE_WAITS):
        try:
            stamp = _made(engine_for(url))
            if stamp is not None and stamp != optuna_head():
                raise StoreError(
                    f"database {url}: its optuna tables are at revision {stamp}, optuna "
                    f"{optuna.__version__} needs {optuna_head()} (`optuna storage upgrade "
                    f"--storage URL` upgrades older tables; a newer optuna made newer ones)")
            fast = stamp is not None
            storage = optuna.storages.RDBStorage(url, engine_kwargs=kwargs,
                                                 skip_table_creation=fast,
                                                 skip_compatibility_check=fast)
            break
        except (IntegrityError, OperationalError) as e:
            # two sweeps creating Optuna's tables in one new file at once (PostgreSQL, or a
            # file left to Optuna's own open): the loser's CREATE, insert or stamp fails; the
            # winner's tables are there a moment later
            if attempt == RACE_WAITS - 1:
                raise _store_error(url, e) from e
            time.sleep(0.05)
        except SQLAlchemyError as e:
            raise _store_error(url, e) from e
        except RuntimeError as e:  # Optuna's own check: tables of another Optuna version
            raise StoreError(f"database {url}: {e}") from e
    if url.startswith("sqlite"):
        # Optuna's own engine: same WAL/synchronous=NORMAL pragmas as ours (no fsync per
        # commit; a killed process still loses nothing committed)
        event.listen(storage.engine, "connect", _sqlite_pragmas)
        storage.engine.dispose()
    return storage


def opened_before() -> bool:
    """Has this process opened Optuna's storage on some file (its imports paid)?"""
    return bool(_STORAGES)


def _close_storage(storage: Any) -> None:
    storage.engine.dispose()


def close_storages() -> None:
    close_every(_STORAGES, _close_storage)


def storage_for(url: str) -> Any:
    """Optuna's storage on `url`, opened once per file and process (sweeps in two threads
    of one process share it: `per_file` makes the second wait for the first one's open)."""
    return per_file(_STORAGES, url, lambda: _new_storage(url), _close_storage)
