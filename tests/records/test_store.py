"""Record store: schema creation, migrations from a checked-in older database, error paths."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from arbiter import Config, FusedRegion, Measurement, Status, StoreError
from arbiter.cli import main
from arbiter.lane import get_lane
from arbiter.records import (
    FINAL,
    SCHEMA_REVISION,
    SWEEP,
    VERIFY,
    CandidateModel,
    EnvironmentModel,
    Fingerprint,
    LaneModel,
    MeasurementModel,
    Records,
    RegionModel,
    WinnerModel,
    alembic_config,
    revision_of,
    session_scope,
    upgrade,
)

OLD = Path(__file__).parents[1] / "data" / "arbiter-0001.db"


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
    assert r.lane == "numpy" and r.latency == pytest.approx(2e-4)  # old medians, as latencies
    assert r.latency_low is None and not r.unstable


def test_cli_on_older_database_says_one_line(tmp_path, capsys):
    db = tmp_path / "old.db"
    shutil.copy(OLD, db)
    spec = Path(__file__).parents[2] / "examples" / "regions.toml"
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
    spec = Path(__file__).parents[2] / "examples" / "regions.toml"
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

    from arbiter.records._models import VERSION_TABLE, Base

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
    code = ("import sys, time; from arbiter.records import Records\n"
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


def test_a_database_deleted_between_uses_gets_a_new_file_not_the_old_handle(tmp_path):
    url = f"sqlite:///{tmp_path / 'gone.db'}"
    Records(url)
    (tmp_path / "gone.db").unlink()
    for extra in ("gone.db-wal", "gone.db-shm"):
        (tmp_path / extra).unlink(missing_ok=True)
    _ids(Records(url))
    assert revision_of(url) == SCHEMA_REVISION and (tmp_path / "gone.db").stat().st_size > 0


def _ids(records: Records, name: str = "r", cpu: str = "here") -> tuple[int, int, dict]:
    return records.ids(FusedRegion(2, 2, 2, name=name), Fingerprint({"cpu": cpu}),
                       [get_lane("numpy"), get_lane("x86_c")])


OK = Measurement(Status.OK, 1e-7, 2e-7, (2e-3, 3e-3, 2e-3, 2e-3, 2.2e-3, 4e-3), "host", 0.5,
                 log="fine", load=0.25)


def test_a_measurement_is_recorded_with_its_estimate_and_read_back_as_it_was(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    records = Records(url)
    rid, eid, lanes = _ids(records)
    r = records.record(rid, eid, lanes["numpy"], Config.of(k=1, s="x"), OK, 1e-3)
    assert r == records.results(rid, eid)[0]
    e = OK.estimate
    assert (r.latency, r.latency_low, r.latency_high, r.spread) == (e.latency, e.low, e.high,
                                                                   e.spread)
    assert r.latency == 2e-3 and r.load == 0.25 and r.log == "fine" and not r.unstable
    with session_scope(url) as s:
        row = s.query(MeasurementModel).one()
        assert row.sample_list() == list(OK.samples) and row.median == pytest.approx(2.1e-3)


def test_a_candidate_recorded_again_keeps_its_row_and_gets_both_measurements(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    records = Records(url)
    rid, eid, lanes = _ids(records)
    first = records.record(rid, eid, lanes["numpy"], Config.of(k=1), OK, 1e-3, kind=FINAL)
    again = records.record(rid, eid, lanes["numpy"], Config.of(k=1), OK, 1e-3)
    other = records.record(rid, eid, lanes["numpy"], Config.of(k=2), OK, 1e-3)
    assert again.candidate_id == first.candidate_id != other.candidate_id
    with session_scope(url) as s:
        assert s.query(CandidateModel).count() == 2
        assert s.query(MeasurementModel).filter_by(candidate_id=first.candidate_id).count() == 2
    assert [r.config for r in records.results(rid, eid)] == [Config.of(k=1), Config.of(k=2)]


def test_ids_are_found_again_and_a_regions_latest_name_is_kept(tmp_path):
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    records = Records(url)
    first, again = _ids(records, "old"), _ids(records, "new")
    other = records.ids(FusedRegion(2, 2, 4, name="b"), Fingerprint({"cpu": "there"}),
                        [get_lane("numpy")])
    assert first == again
    assert other[0] != first[0] and other[1] != first[1] and other[2] == {
        "numpy": first[2]["numpy"]}
    with session_scope(url) as s:
        assert [r.name for r in s.query(RegionModel).order_by(RegionModel.id)] == ["new", "b"]
        assert s.query(EnvironmentModel).count() == 2
        assert {(ln.name, ln.platform) for ln in s.query(LaneModel)} == {
            ("numpy", "cpu"), ("x86_c", "cpu")}


def test_results_are_each_candidates_latest_measurement_of_a_kind(tmp_path):
    records = Records(f"sqlite:///{tmp_path / 'r.db'}")
    rid, eid, ids = _ids(records)
    other = _ids(records, "o", "there")
    bad = Measurement(Status.WRONG_RESULT, 0.5, None, (), "", 0.0, log="off")
    for lane, cfg, m, kind in [("numpy", {"k": 1}, OK, SWEEP), ("numpy", {"k": 1}, OK, FINAL),
                               ("x86_c", {"b": 2}, bad, SWEEP), ("numpy", {"k": 1}, bad, FINAL),
                               ("x86_c", {"b": 4}, OK, VERIFY), ("numpy", {"k": 2}, OK, SWEEP)]:
        records.record(rid, eid, ids[lane], Config.of(cfg), m, 1e-3, kind=kind)
        records.record(other[0], other[1], other[2][lane], Config.of(cfg), m, 1e-3, kind=kind)
    assert [(r.lane, r.config.as_dict(), r.status) for r in records.results(rid, eid)] == [
        ("numpy", {"k": 1}, Status.OK), ("x86_c", {"b": 2}, Status.WRONG_RESULT),
        ("numpy", {"k": 2}, Status.OK)]
    assert [r.status for r in records.results(rid, eid, FINAL)] == [Status.WRONG_RESULT]
    assert [r.config.as_dict() for r in records.results(rid, eid, VERIFY)] == [{"b": 4}]


def test_a_winner_declared_again_is_updated_not_added(tmp_path):
    url = f"sqlite:///{tmp_path / 'w.db'}"
    records = Records(url)
    rid, eid, lanes = _ids(records)
    a, b = (records.record(rid, eid, lanes["numpy"], Config.of(k=i), OK, 1e-3) for i in (1, 2))
    records.save_winner(rid, eid, 1e-3, {"candidate_id": a.candidate_id, "latency": 2e-3})
    [first] = records.winners(rid, eid, 1e-3)
    records.save_winner(rid, eid, 1e-3, {"candidate_id": b.candidate_id, "latency": 1e-3,
                                         "runner_up_id": a.candidate_id, "margin": 1e-3,
                                         "verdict": "faster", "ratio": 2.0})
    [w] = records.winners(rid, eid)
    assert w["candidate_id"] == b.candidate_id and w["latency_ms"] == 1.0
    assert w["runner_up"]["candidate_id"] == a.candidate_id
    assert w["runner_up"]["latency_ms"] == pytest.approx(2.0) and w["verdict"] == "faster"
    assert w["declared_at"] > first["declared_at"]
    with session_scope(url) as s:
        assert s.query(WinnerModel).count() == 1


def test_a_tie_declared_before_the_rounds_is_still_a_tie_after_the_upgrade(tmp_path):
    import json

    import arbiter
    from arbiter.records import fingerprint

    url = f"sqlite:///{tmp_path / 'old3.db'}"
    upgrade(url, "0003")
    region = FusedRegion(2, 2, 2, name="r")
    fp = fingerprint()
    con = sqlite3.connect(tmp_path / "old3.db")
    con.executescript(f"""
        insert into regions values (1, '{region.key}', 'r', 'fused',
            '{json.dumps(region.canonical())}', '2026-01-01');
        insert into environments values (1, '{fp.hash}', '{{}}', '2026-01-01');
        insert into lanes values (1, 'numpy', '1', 'cpu');
        insert into candidates values (1, 1, 1, 1, 'k', '{{}}', '2026-01-01');
        insert into candidates values (2, 1, 1, 1, 'k2', '{{}}', '2026-01-01');
        insert into measurements (id, candidate_id, status, budget, rel_error, median, spread,
            samples, timing_method, compile_seconds, log, created_at, kind)
            values (1, 1, 'ok', 1e-3, 1e-7, 2e-3, 1e-4, '[0.002]', 'm', 0, '', '2026-01-01',
                    'sweep');
        insert into winners (id, region_id, environment_id, budget, candidate_id, runner_up_id,
            median, spread, rel_error, margin, tie, created_at)
            values (1, 1, 1, 1e-3, 1, 2, 2e-3, 1e-4, 1e-7, 1e-5, 1, '2026-01-01');
    """)
    con.commit()
    con.close()
    assert upgrade(url) == ("0003", SCHEMA_REVISION)
    row = arbiter.best(region, db=url)
    assert row["status"] == "tie" and row["tie"] and row["verdict"] == "tie"
    assert row["latency_ms"] == pytest.approx(2.0) and row["latency_low_ms"] is None
