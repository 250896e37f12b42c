"""`arbiter export`: the records as CSV, Parquet or JSON, and the `schema` key of `--json`."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest

from arbiter import JSON_SCHEMA
from arbiter.cli import main
from arbiter.report import trials, winners
from tests.report import report_db


@pytest.fixture
def known(tmp_path):
    url = f"sqlite:///{tmp_path / 'known.db'}"
    report_db.known(url)
    return url


def test_winners_as_csv_are_the_winners_frame(known, capsys):
    assert main(["export", "--db", known]) == 0
    got = pd.read_csv(io.StringIO(capsys.readouterr().out))
    frame = winners(known)
    assert list(got.columns) == list(frame.columns) and len(got) == len(frame) > 0
    assert list(got["lane"]) == list(frame["lane"])
    assert got["latency_ms"].tolist() == pytest.approx(frame["latency_ms"].tolist())


def test_every_measurement_as_json_rows_with_their_schema(known, capsys):
    assert main(["export", "--db", known, "--what", "trials", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == len(trials(known, measurements=None))
    assert all(r["schema"] == JSON_SCHEMA for r in rows)
    assert {r["measurement"] for r in rows} >= {"sweep", "final"}
    assert all(isinstance(r["measured_at"], str) for r in rows)


def test_parquet_reads_back_as_the_frame(known, tmp_path, capsys):
    out = tmp_path / "trials.parquet"
    pytest.importorskip("pyarrow")
    assert main(["export", "--db", known, "--what", "trials", "--format", "parquet",
                 "--out", str(out)]) == 0
    back = pd.read_parquet(out)
    frame = trials(known, measurements=None)
    assert list(back.columns) == list(frame.columns)
    assert back["candidate_id"].tolist() == frame["candidate_id"].tolist()


@pytest.mark.parametrize("args, needle", [
    (["--format", "parquet"], "give --out FILE"),
    (["--out", "/no/such/folder/w.csv"], "cannot write /no/such/folder/w.csv"),
])
def test_mistakes_are_one_line(known, capsys, args, needle):
    assert main(["export", "--db", known, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("arbiter: error:") and needle in err[0]


def test_a_database_that_is_not_there_is_one_line(tmp_path, capsys):
    assert main(["export", "--db", f"sqlite:///{tmp_path / 'none.db'}"]) == 2
    assert "no database at" in capsys.readouterr().err


def test_every_json_output_carries_its_schema(capsys):
    assert main(["lanes", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and all(r["schema"] == JSON_SCHEMA for r in rows)
