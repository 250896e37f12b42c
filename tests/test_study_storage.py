"""Optuna's tables as the arbiter makes them: what Optuna itself makes and accepts, in any
state a file can be in (new, made by Optuna, made before Optuna used Alembic, another
Optuna's)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
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


def _forbid_scripts(monkeypatch) -> None:
    """Fail the test if Optuna loads its migration scripts (its own, slow open)."""
    from optuna.storages._rdb.storage import _VersionManager

    def refuse(self):
        raise AssertionError("Optuna loaded its migration scripts")

    monkeypatch.setattr(_VersionManager, "_create_alembic_script", refuse)


@pytest.fixture
def no_scripts(monkeypatch):
    _forbid_scripts(monkeypatch)
    return monkeypatch


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


def test_a_new_file_gets_the_tables_and_stamp_optuna_itself_makes(url, tmp_path, no_scripts):
    storage = storage_for(url)
    no_scripts.undo()
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


def test_a_file_whose_optuna_tables_optuna_made_opens_as_is(tmp_path, monkeypatch):
    url = _fresh_optuna_db(tmp_path, "optuna.db")
    before = _schema(url.removeprefix("sqlite:///"))
    optuna.create_study(study_name="kept", storage=url)
    _STORAGES.clear()
    _forbid_scripts(monkeypatch)
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


def test_tables_from_before_optuna_used_alembic_are_refused_in_one_line(url):
    storage_for(url).engine.dispose()
    _STORAGES.clear()
    with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as con, con:
        con.execute("drop table alembic_version")
        con.execute("update version_info set schema_version = 11, library_version = '1.2.0'")
    with pytest.raises(StoreError) as e:
        storage_for(url)
    assert "\n" not in str(e.value) and "optuna storage upgrade" in str(e.value)


CREATE_AT_ONCE = """
import json, sys, time
from optuna.storages._rdb.storage import _VersionManager
from arbiter._study_storage import storage_for
loads = []
slow = _VersionManager._create_alembic_script
_VersionManager._create_alembic_script = lambda self: loads.append(1) or slow(self)
while time.time() < float(sys.argv[2]):
    pass
storage_for(sys.argv[1])
print(json.dumps(len(loads)))
"""


def test_sweeps_making_one_new_files_tables_at_once_all_get_them_made_once(url):
    # the tables are made in one write transaction: the others wait for it and then find the
    # stamp (none falls back to Optuna's own open, none sees a table without its index)
    start = str(time.time() + 4)  # imports first, then all at once
    procs = [subprocess.Popen([sys.executable, "-c", CREATE_AT_ONCE, url, start],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(6)]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    assert [json.loads(out) for out, _ in results] == [0] * 6
    assert _optuna_rows(url.removeprefix("sqlite:///")) == (
        [(optuna_head(),)], [(1, optuna.storages._rdb.models.SCHEMA_VERSION,
                              optuna.__version__)])


def test_an_optuna_laid_out_otherwise_opens_its_own_way(url, monkeypatch):
    # no head of Optuna's migrations to be found (its private layout moved): Optuna's own
    # open makes and stamps the tables, as it did before the arbiter made them
    from arbiter import _study_storage

    monkeypatch.setattr(_study_storage, "optuna_head", lambda: None)
    storage = storage_for(url)
    monkeypatch.undo()
    assert _optuna_rows(url.removeprefix("sqlite:///"))[0] == [(optuna_head(),)]
    assert storage.get_all_studies() == []
