"""`arbiter export`: the records as CSV, Parquet or JSON, and the `schema` key of `--json`."""

from __future__ import annotations

import io
import json
import os

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


def test_an_out_file_that_cannot_be_finished_leaves_the_old_one_whole(known, tmp_path, capsys,
                                                                      monkeypatch):
    """`--out` is written beside its name and moved over it whole (a disk that fills midway
    left a file cut short under the final name)."""
    import contextlib
    import errno

    out = tmp_path / "w.csv"
    out.write_text("an earlier export\n")

    def full_disk(self, target, **_):  # writes a little, then the disk is full
        with contextlib.ExitStack() as stack:
            if isinstance(target, str):  # (a path: opened here, as pandas would)
                target = stack.enter_context(open(target, "w"))
            target.write("lane,la")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_disk)
    assert main(["export", "--db", known, "--out", str(out)]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert out.read_text() == "an earlier export\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".w.csv")] == []
