"""Optuna's tables as the arbiter makes them: what Optuna itself makes and accepts, in any
state a file can be in (new, made by Optuna, made before Optuna used Alembic, another
Optuna's)."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import optuna
import pytest

from arbiter._errors import StoreError
from arbiter._store import require_current
from arbiter._study_storage import _STORAGES, optuna_head, storage_for


@pytest.fixture(autouse=True)
def _no_storage_kept():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    yield
    for _, storage in _STORAGES.values():
        storage.engine.dispose()
    _STORAGES.clear()


def _arbiter_db(tmp_path, name: str = "arbiter.db") -> str:
    url = f"sqlite:///{tmp_path / name}"
    require_current(url)
    return url


@pytest.fixture
def url(tmp_path):
    return _arbiter_db(tmp_path)


def _schema(path: str) -> list[tuple]:
    with closing(sqlite3.connect(path)) as con:
        return con.execute("select type, name, sql from sqlite_master where name not like "
                           "'sqlite_%' order by type, name").fetchall()


def _optuna_rows(path: str) -> tuple:
    with closing(sqlite3.connect(path)) as con:
        return (con.execute("select version_num from alembic_version").fetchall(),
                con.execute("select version_info_id, schema_version, library_version "
                            "from version_info").fetchall())


def _fresh_optuna_db(tmp_path, name: str) -> str:
    url = _arbiter_db(tmp_path, name)
    optuna.storages.RDBStorage(url).engine.dispose()  # Optuna's own tables, its own way
    return url


def test_a_new_file_gets_the_tables_and_stamp_optuna_itself_makes(url, tmp_path):
    storage = storage_for(url)
    ours, theirs = url.removeprefix("sqlite:///"), _fresh_optuna_db(tmp_path, "optuna.db")
    theirs = theirs.removeprefix("sqlite:///")
    assert _schema(ours) == _schema(theirs)
    assert _optuna_rows(ours) == _optuna_rows(theirs) == (
        [(optuna_head(),)], [(1, optuna.storages._rdb.models.SCHEMA_VERSION,
                              optuna.__version__)])
    # Optuna's own open, with its schema check, takes the file and reads what we wrote
    study = optuna.create_study(study_name="s", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", -1.0, 1.0) ** 2, n_trials=3)
    again = optuna.load_study(study_name="s", storage=url)
    assert [t.value for t in again.trials] == [t.value for t in study.trials]


def test_a_file_whose_optuna_tables_optuna_made_opens_as_is(tmp_path):
    url = _fresh_optuna_db(tmp_path, "optuna.db")
    before = _schema(url.removeprefix("sqlite:///"))
    optuna.create_study(study_name="kept", storage=url)
    _STORAGES.clear()
    storage = storage_for(url)
    assert [s.study_name for s in storage.get_all_studies()] == ["kept"]
    assert _schema(url.removeprefix("sqlite:///")) == before


def test_optuna_tables_without_a_stamp_are_left_to_optuna_which_stamps_them(url):
    storage_for(url).engine.dispose()
    _STORAGES.clear()
    path = url.removeprefix("sqlite:///")
    with closing(sqlite3.connect(path)) as con, con:
        con.execute("drop table alembic_version")  # as a file from before Optuna used Alembic
    storage = storage_for(url)
    assert _optuna_rows(path)[0] == [(optuna_head(),)]
    assert storage.get_all_studies() == []


@pytest.mark.parametrize("stamp", ["v99.0.0.a", "v3.0.0.a"])
def test_another_optunas_tables_are_refused_in_one_line(url, stamp):
    storage_for(url).engine.dispose()
    _STORAGES.clear()
    with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as con, con:
        con.execute("update alembic_version set version_num = ?", (stamp,))
    with pytest.raises(StoreError) as e:
        storage_for(url)
    text = str(e.value)
    assert "\n" not in text and stamp in text and optuna_head() in text
    assert "optuna storage upgrade" in text
    assert not _STORAGES  # nothing half-open is kept for the next sweep


def test_an_optuna_laid_out_otherwise_opens_its_own_way(url, monkeypatch):
    # no head of Optuna's migrations to be found (its private layout moved): Optuna's own
    # open makes and stamps the tables, as it did before the arbiter made them
    from arbiter import _study_storage

    monkeypatch.setattr(_study_storage, "optuna_head", lambda: None)
    storage = storage_for(url)
    monkeypatch.undo()
    assert _optuna_rows(url.removeprefix("sqlite:///"))[0] == [(optuna_head(),)]
    assert storage.get_all_studies() == []
