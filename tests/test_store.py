"""Record store: schema creation, migrations from a checked-in older database, error paths."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from arbiter import FusedRegion, StoreError
from arbiter._records import Records
from arbiter._store import (
    SCHEMA_REVISION,
    CandidateModel,
    RegionModel,
    WinnerModel,
    revision_of,
    session_scope,
    upgrade,
)
from arbiter._store.session import alembic_config
from arbiter.cli import main

OLD = Path(__file__).parent / "data" / "arbiter-0001.db"


def test_code_schema_is_the_migrations_head():
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head == SCHEMA_REVISION


def test_empty_database_upgrades_to_head_with_all_tables(tmp_path):
    url = f"sqlite:///{tmp_path / 'new.db'}"
    assert revision_of(url) is None
    assert upgrade(url) == (None, SCHEMA_REVISION)
    names = {r[0] for r in sqlite3.connect(tmp_path / "new.db").execute(
        "select name from sqlite_master where type='table'")}
    assert {"regions", "environments", "lanes", "candidates", "measurements",
            "winners"} <= names
    assert upgrade(url) == (SCHEMA_REVISION, SCHEMA_REVISION)  # idempotent


def test_fresh_database_is_created_by_first_use(tmp_path):
    url = f"sqlite:///{tmp_path / 'auto.db'}"
    Records(url)
    assert revision_of(url) == SCHEMA_REVISION
    mode = sqlite3.connect(tmp_path / "auto.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_older_database_is_refused_with_the_upgrade_command(tmp_path):
    db = tmp_path / "old.db"
    shutil.copy(OLD, db)
    url = f"sqlite:///{db}"
    with pytest.raises(StoreError, match=r"schema 0001.*arbiter db upgrade"):
        Records(url)


def test_older_database_upgrades_and_keeps_its_rows(tmp_path, capsys):
    db = tmp_path / "old.db"
    shutil.copy(OLD, db)
    url = f"sqlite:///{db}"
    assert main(["db", "upgrade", "--db", url]) == 0
    assert f"0001 -> {SCHEMA_REVISION}" in capsys.readouterr().out
    records = Records(url)
    with session_scope(url) as s:
        region = s.query(RegionModel).one()
    [r] = records.results(region.id, 1)
    assert r.lane == "numpy" and r.median == pytest.approx(2e-4)  # old rows read as sweep rows


def test_cli_on_older_database_says_one_line(tmp_path, capsys):
    db = tmp_path / "old.db"
    shutil.copy(OLD, db)
    spec = Path(__file__).parent.parent / "examples" / "regions.toml"
    assert main(["best", str(spec), "mm_relu", "--db", f"sqlite:///{db}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "arbiter db upgrade" in err[0]


def test_candidate_identity_is_unique_and_errors_become_store_errors(tmp_path):
    url = f"sqlite:///{tmp_path / 'u.db'}"
    Records(url)
    region = FusedRegion(2, 2, 2, name="r")
    with session_scope(url) as s:
        rid = RegionModel.find_or_add(s, region).id
    with pytest.raises(StoreError, match="IntegrityError"):
        with session_scope(url) as s:
            for _ in range(2):
                s.add(CandidateModel(region_id=rid, environment_id=1, lane_id=1,
                                     config_key="k", config="{}"))
                s.flush()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
@pytest.mark.parametrize("verb", ["tune", "best"])
def test_sqlite_in_memory_is_refused_in_one_line(url, verb, capsys):
    # each connection (Optuna's storage has its own) would see an empty database of its own
    spec = Path(__file__).parent.parent / "examples" / "regions.toml"
    args = ([verb, str(spec), "--lanes", "numpy", "--trials", "1"] if verb == "tune"
            else [verb, str(spec), "mm_relu"])
    assert main([*args, "--db", url]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "in memory is not supported" in err[0] and "sqlite:///" in err[0]


def test_unreachable_url_is_a_store_error():
    with pytest.raises(StoreError):
        Records("sqlite:////nonexistent-dir/x/y.db")


def _schema(url: str) -> dict:
    from sqlalchemy import create_engine, inspect

    insp = inspect(create_engine(url))
    out = {}
    for t in sorted(insp.get_table_names()):
        out[t] = {
            # order aside: a migration appends the columns it adds
            "columns": sorted((c["name"], str(c["type"]), c["nullable"], c["default"])
                              for c in insp.get_columns(t)),
            "pk": sorted(insp.get_pk_constraint(t)["constrained_columns"]),
            "fks": sorted((tuple(f["constrained_columns"]), f["referred_table"])
                          for f in insp.get_foreign_keys(t)),
            "indexes": sorted((tuple(i["column_names"]), bool(i["unique"]))
                              for i in insp.get_indexes(t)),
            "unique": sorted(tuple(u["column_names"]) for u in insp.get_unique_constraints(t)),
        }
    return out


def test_first_use_creates_the_schema_the_migrations_build(tmp_path):
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import create_engine

    from arbiter._store.models import VERSION_TABLE, Base

    created, migrated = f"sqlite:///{tmp_path / 'c.db'}", f"sqlite:///{tmp_path / 'm.db'}"
    Records(created)  # create_all + stamp
    upgrade(migrated)  # every migration from empty
    assert _schema(created) == _schema(migrated)
    with create_engine(migrated).connect() as conn:  # and the models are the migrations' head
        ours = MigrationContext.configure(conn, opts={
            "include_name": lambda name, kind, _: kind != "table" or name in Base.metadata.tables})
        assert compare_metadata(ours, Base.metadata) == []
    with create_engine(created).connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        assert ctx.get_current_revision() == SCHEMA_REVISION
    assert upgrade(created) == (SCHEMA_REVISION, SCHEMA_REVISION)  # alembic agrees: nothing to do


def test_processes_creating_one_database_at_once_all_get_it(tmp_path):
    import subprocess
    import sys
    import time

    db = tmp_path / "shared.db"
    # imports first, then all at the same instant
    code = ("import sys, time; from arbiter._records import Records\n"
            "while time.time() < float(sys.argv[2]): pass\n"
            "Records(sys.argv[1])")
    start = str(time.time() + 3)
    procs = [subprocess.Popen([sys.executable, "-c", code, f"sqlite:///{db}", start],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    results = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in results]
    assert revision_of(f"sqlite:///{db}") == SCHEMA_REVISION
    rows = sqlite3.connect(db).execute("select version_num from arbiter_alembic_version")
    assert rows.fetchall() == [(SCHEMA_REVISION,)]


def test_databases_used_and_deleted_in_one_process_leave_few_files_open(tmp_path):
    # a notebook going through many throwaway databases: the engines (and Optuna's storages)
    # kept per file are bounded, so their pooled connections do not pile up for ever
    import os

    from arbiter._store.session import PER_FILE_KEPT
    from arbiter._studies import open_study

    def deleted_open() -> int:
        if not os.path.isdir("/proc/self/fd"):
            pytest.skip("no /proc/self/fd here")
        links = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                links.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        return sum(1 for link in links if link.endswith("(deleted)"))

    before = deleted_open()
    for i in range(24):
        folder = tmp_path / f"nb{i}"
        folder.mkdir()
        url = f"sqlite:///{folder / 'arbiter.db'}"
        Records(url)
        open_study(url, "s")
        shutil.rmtree(folder)
    # at most PER_FILE_KEPT databases held, each by two engines (ours, Optuna's) with their
    # database, -wal and -shm files
    assert PER_FILE_KEPT <= 12 and deleted_open() - before <= PER_FILE_KEPT * 2 * 3


def test_a_fingerprint_started_early_is_the_one_every_caller_gets(monkeypatch):
    # `tune` starts the fingerprint in a thread before its imports; the sweep's own call
    # waits for that one instead of querying the compilers a second time
    import threading
    import time

    from arbiter import _fingerprint

    _fingerprint._details.cache_clear()
    queried: list[str] = []
    query = _fingerprint._compiler_version
    gate = threading.Event()

    def slow_query(compiler: str) -> str | None:
        queried.append(compiler)
        gate.wait(5)
        return query(compiler)

    monkeypatch.setattr(_fingerprint, "_compiler_version", slow_query)
    _fingerprint.fingerprint_soon()
    got: list[object] = []
    caller = threading.Thread(target=lambda: got.append(_fingerprint.fingerprint()))
    caller.start()
    time.sleep(0.2)  # both callers in, the queries held
    gate.set()
    caller.join(10)
    assert got and got[0] is _fingerprint.fingerprint()
    assert sorted(queried) == sorted((_fingerprint.settings().cc, *_fingerprint.COMPILERS))


@pytest.mark.parametrize("by_driver", [True, False])
def test_a_winner_another_sweep_saved_first_is_updated_not_an_error(tmp_path, monkeypatch,
                                                                     by_driver):
    # two sweeps of one region ending at once: both looked for the winner's row, found none,
    # and the second one's insert meets the first one's (on SQLite's own cursor, and through
    # SQLAlchemy, as elsewhere)
    from sqlalchemy import insert

    import arbiter._store.driver as driver
    from arbiter import Config, Measurement, Status
    from arbiter._fingerprint import Fingerprint
    from arbiter._records import choose
    from arbiter._registry import get_lane

    if not by_driver:
        monkeypatch.setattr(driver, "by_driver", lambda conn: False)
    url = f"sqlite:///{tmp_path / 'w.db'}"
    records = Records(url)
    region = FusedRegion(2, 2, 2, name="r")
    rid, eid, lanes = records.ids(region, Fingerprint({"cpu": "here"}), [get_lane("numpy")])
    results = [records.record(rid, eid, lanes["numpy"], Config.of(k=i),
                              Measurement(Status.OK, 1e-7, 1e-7, (t, t, t), "host", 0.0),
                              1e-3) for i, t in enumerate((2e-3, 1e-3))]
    records.save_winner(rid, eid, 1e-3, choose(results[:1], 1e-3))
    with session_scope(url) as s:
        first = s.query(WinnerModel).one()
        created, first_id = first.created_at, first.id
    save, calls = WinnerModel.save.__func__, []

    def missed_once(cls, run, values):
        calls.append(values)
        if len(calls) == 1:  # its lookup came before the other sweep's insert
            run.many("test add winner", insert(cls), cls.__table__,
                     [{**values, "created_at": created}])
        else:
            save(cls, run, values)

    monkeypatch.setattr(WinnerModel, "save", classmethod(missed_once))
    records.save_winner(rid, eid, 1e-3, choose(results, 1e-3))
    assert len(calls) == 2  # the insert met the row, and the second try found it
    w = records.winner(rid, eid, 1e-3)
    assert (w["candidate_id"], w["runner_up"]["config"]) == (results[1].candidate_id, {"k": 0})
    assert (w["latency_ms"], w["tie"]) == (1.0, False)
    with session_scope(url) as s:
        w = s.query(WinnerModel).one()
        assert w.id == first_id and w.created_at > created  # updated (declared again)


@pytest.mark.parametrize("path", ["driver", "returning", "lookup"])
def test_a_candidate_recorded_again_keeps_its_row_and_gets_both_measurements(
        tmp_path, monkeypatch, path):
    # a candidate first measured by another kind (a finalist's re-timing, a winner's check)
    # is found, not inserted twice: on SQLite's own cursor, and through SQLAlchemy with an
    # insert that can say "there already" and without
    import arbiter._records as records_module
    import arbiter._store.driver as driver
    from arbiter import Config, Measurement, Status
    from arbiter._fingerprint import Fingerprint
    from arbiter._registry import get_lane
    from arbiter._store import MeasurementModel
    from arbiter._store.models import FINAL
    from arbiter._store.session import engine_for

    returning = path != "lookup"
    if returning and sqlite3.sqlite_version_info < (3, 35):
        pytest.skip("SQLite before 3.35 has no RETURNING")
    url = f"sqlite:///{tmp_path / 'c.db'}"
    records = Records(url)
    monkeypatch.setattr(engine_for(url).dialect, "insert_returning", returning)
    if path != "driver":
        monkeypatch.setattr(driver, "by_driver", lambda conn: False)
    added = []  # the inserts that say "there already", as they ran
    real_add = records_module._add_candidate

    def add(dialect, can_return):
        statement = real_add(dialect, can_return)
        added.append(statement is not None)
        return statement

    monkeypatch.setattr(records_module, "_add_candidate", add)
    region = FusedRegion(2, 2, 2, name="r")
    rid, eid, lanes = records.ids(region, Fingerprint({"cpu": "here"}), [get_lane("numpy")])
    m = Measurement(Status.OK, 1e-7, 1e-7, (1e-3, 2e-3), "host", 0.0)
    first = records.record(rid, eid, lanes["numpy"], Config.of(k=1), m, 1e-3, kind=FINAL)
    again = records.record(rid, eid, lanes["numpy"], Config.of(k=1), m, 1e-3)
    other = records.record(rid, eid, lanes["numpy"], Config.of(k=2), m, 1e-3)
    assert again.candidate_id == first.candidate_id != other.candidate_id
    with session_scope(url) as s:
        assert s.query(CandidateModel).count() == 2
        assert s.query(MeasurementModel).filter_by(candidate_id=first.candidate_id).count() == 2
    assert [r.config for r in records.results(rid, eid)] == [Config.of(k=1), Config.of(k=2)]
    if path != "driver":
        assert added == [returning] * 3


def test_sqlites_own_cursor_writes_the_rows_sqlalchemy_writes(tmp_path, monkeypatch):
    import datetime
    import math

    import arbiter._store.driver as driver
    from arbiter import Config, Measurement, Status
    from arbiter._fingerprint import Fingerprint
    from arbiter._registry import get_lane
    from arbiter._store import MeasurementModel

    if sqlite3.sqlite_version_info < (3, 35):
        pytest.skip("SQLite before 3.35 has no RETURNING: always SQLAlchemy's statements")
    rows = []
    for by_driver in (True, False):
        url = f"sqlite:///{tmp_path / f'{by_driver}.db'}"
        records = Records(url)
        monkeypatch.setattr(driver, "by_driver",
                            lambda conn, b=by_driver: b and conn.dialect.name == "sqlite")
        rid, eid, lanes = records.ids(FusedRegion(2, 2, 2, name="r"),
                                      Fingerprint({"cpu": "here"}), [get_lane("numpy")])
        m = Measurement(Status.WRONG_RESULT, 0.25, math.pi, (1e-3, 3e-3, 2e-3), "host", 0.5,
                        log="it's\n'quoted'")
        before = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
        r = records.record(rid, eid, lanes["numpy"], Config.of(k=1, s="x"), m, 1e-3)
        assert (r.candidate_id, r.lane, r.median, r.spread) == (1, "numpy", 2e-3, m.spread)
        with session_scope(url) as s:
            c = s.query(CandidateModel).one()
            row = s.query(MeasurementModel).one()
            assert before <= c.created_at <= row.created_at <= before + datetime.timedelta(
                seconds=60)
            rows.append(({k: v for k, v in vars(c).items() if k[0] != "_" and k != "created_at"},
                         {k: v for k, v in vars(row).items() if k[0] != "_"
                          and k != "created_at"}))
    assert rows[0] == rows[1]
    assert rows[0][1]["log"] == "it's\n'quoted'" and rows[0][1]["max_abs"] == math.pi
    # the driver's own errors are store errors too, and nothing of the record stays
    monkeypatch.setattr(driver, "by_driver", lambda conn: True)
    with sqlite3.connect(tmp_path / "True.db") as raw:
        raw.execute("CREATE TRIGGER no_more BEFORE INSERT ON measurements "
                    "BEGIN SELECT RAISE(ABORT, 'disk says no'); END")
    with pytest.raises(StoreError, match="disk says no"):
        Records(f"sqlite:///{tmp_path / 'True.db'}").record(rid, eid, lanes["numpy"],
                                                             Config.of(k=2), m, 1e-3)
    with session_scope(f"sqlite:///{tmp_path / 'True.db'}") as s:
        assert s.query(CandidateModel).count() == 1


def test_ids_are_found_again_and_a_regions_latest_name_is_kept(tmp_path):
    from arbiter._fingerprint import Fingerprint
    from arbiter._registry import get_lane
    from arbiter._store import EnvironmentModel, LaneModel

    url = f"sqlite:///{tmp_path / 'ids.db'}"
    records = Records(url)
    lanes = [get_lane("numpy"), get_lane("x86_c")]
    first = records.ids(FusedRegion(2, 2, 2, name="old"), Fingerprint({"cpu": "here"}), lanes)
    again = records.ids(FusedRegion(2, 2, 2, name="new"), Fingerprint({"cpu": "here"}), lanes)
    other = records.ids(FusedRegion(2, 2, 4, name="b"), Fingerprint({"cpu": "there"}), lanes[:1])
    assert first == again
    assert other[0] != first[0] and other[1] != first[1] and other[2] == {
        "numpy": first[2]["numpy"]}
    with session_scope(url) as s:
        assert [r.name for r in s.query(RegionModel).order_by(RegionModel.id)] == ["new", "b"]
        assert s.query(EnvironmentModel).count() == 2
        assert {(ln.name, ln.platform) for ln in s.query(LaneModel)} == {
            ("numpy", "cpu"), ("x86_c", "cpu")}
        assert all(r.created_at is not None for r in s.query(RegionModel))


def test_results_are_each_candidates_latest_measurement_of_a_kind(tmp_path):
    # read in one Core query: what the ORM's candidates and their measurements say
    from arbiter import Config, Measurement, Status
    from arbiter._fingerprint import Fingerprint
    from arbiter._records import _result
    from arbiter._registry import get_lane
    from arbiter._store.models import FINAL, SWEEP, VERIFY

    url = f"sqlite:///{tmp_path / 'r.db'}"
    records = Records(url)
    lanes = [get_lane("numpy"), get_lane("x86_c")]
    rid, eid, ids = records.ids(FusedRegion(2, 2, 2, name="r"), Fingerprint({"cpu": "a"}), lanes)
    other = records.ids(FusedRegion(2, 2, 4, name="o"), Fingerprint({"cpu": "b"}), lanes)
    ok = Measurement(Status.OK, 1e-7, 2e-7, (1e-3, 3e-3, 2e-3), "host", 0.5, log="fine")
    bad = Measurement(Status.WRONG_RESULT, 0.5, None, (), "", 0.0, log="off")
    for lane, cfg, m, kind in [("numpy", {"k": 1}, ok, SWEEP), ("numpy", {"k": 1}, ok, FINAL),
                               ("x86_c", {"b": 2}, bad, SWEEP), ("numpy", {"k": 1}, bad, FINAL),
                               ("x86_c", {"b": 4}, ok, VERIFY), ("numpy", {"k": 2}, ok, SWEEP)]:
        records.record(rid, eid, ids[lane], Config.of(cfg), m, 1e-3, kind=kind)
        records.record(other[0], other[1], other[2][lane], Config.of(cfg), m, 1e-3, kind=kind)
    for kind in (SWEEP, FINAL, VERIFY):
        with session_scope(url) as s:
            want = [_result(c, [m for m in c.measurements if m.kind == kind][-1])
                    for c in CandidateModel.of_region(s, rid, eid)
                    if any(m.kind == kind for m in c.measurements)]
        assert records.results(rid, eid, kind) == want and want
    assert [r.status for r in records.results(rid, eid, FINAL)] == [Status.WRONG_RESULT]


@pytest.mark.parametrize("url", [
    "sqlite:///arbiter.db", "sqlite:////tmp/x/arbiter.db", "sqlite+pysqlite:///a/b.db",
    "sqlite:///arbiter.db?timeout=5", "sqlite://", "sqlite:///:memory:",
    "postgresql://u:p@h/db", "arbiter.db",
])
def test_the_sweep_locks_reading_of_a_url_is_sqlalchemys(url):
    # (the lock is taken before SQLAlchemy is imported, so it reads the URL itself)
    from arbiter._store.session import sqlite_path
    from arbiter._sweep_lock import sqlite_file

    assert sqlite_file(url) == sqlite_path(url)
