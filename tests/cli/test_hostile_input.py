"""Issue 41's attacks on the command line, each as the reviewer ran it: one line and a
non-zero exit, never a traceback, a leaked password, unbounded memory or non-JSON output."""

from __future__ import annotations

import io
import json
import math
import os
import sqlite3
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from arbiter import _errors

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "regions.toml"
ONE = '[[region]]\nname = "r"\nM = 8\nN = 16\nK = 8\nepilogue = ["bias"]\n'


@pytest.fixture
def env(tmp_path):
    return dict(os.environ, ARBITER_CACHE_DIR=str(tmp_path / "cache"),
                ARBITER_DB=f"sqlite:///{tmp_path / 'arbiter.db'}", OPENBLAS_NUM_THREADS="1")


def arbiter(env, *args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "arbiter", *map(str, args)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, **kw)


def one_line_error(p: subprocess.CompletedProcess, needle: str = "") -> str:
    """The one error line (a busy machine's notice may come before it, on a line of its own)."""
    lines = p.stderr.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("arbiter: error:")]
    assert p.returncode == 2 and len(errors) == 1, p.stderr[-3000:]
    assert all(ln.startswith("arbiter: ") for ln in lines), p.stderr[-3000:]
    assert needle in errors[0], errors[0]
    return errors[0]


# --- 9: a credential in the database URL, in any form SQLAlchemy accepts ----------------------

SECRET = "Hunter2-secret"
URLS = [
    f"postgresql://u:{SECRET}@127.0.0.1:1/x",
    f"postgresql://u:{SECRET} with spaces@127.0.0.1:1/x",  # unencoded: SQLAlchemy reads it
    f"postgresql://u:{SECRET}/slash?x@127.0.0.1:1/x",
    f"postgresql+psycopg://u@127.0.0.1:1/x?password={SECRET}",
    f"postgresql+psycopg://u@127.0.0.1:1/x?sslmode=disable&password={SECRET} spaced",
    f"postgresql+psycopg://u@127.0.0.1:1/x?pass%77ord={SECRET}",
    f"postgresql+psycopg://u@127.0.0.1:1/x?sslpassword={SECRET}",
    f"postgresql+psycopg://u@127.0.0.1:1/x?dbname=host%3Dh%20password%3D{SECRET}",
]


def main_error(capsys, *args, needle: str = "database") -> str:
    """`arbiter *args` in this process: its one error line (and nothing on stdout)."""
    from arbiter.cli import main

    assert main([str(a) for a in args]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    return one_line_error(subprocess.CompletedProcess(args, 2, "", err), needle)


def test_no_form_of_password_is_printed(env, tmp_path, capsys, monkeypatch):
    (tmp_path / "one.toml").write_text(ONE)
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    for url in URLS:
        for args in (["tune", tmp_path / "one.toml", "--lanes", "numpy"], ["db", "upgrade"],
                     ["best", tmp_path / "one.toml"]):
            line = main_error(capsys, *args, "--db", url)
            assert SECRET.split("-")[0] not in line and "127.0.0.1" in line, line
        monkeypatch.setenv("ARBITER_DB", url)
        line = main_error(capsys, "tune", tmp_path / "one.toml", "--lanes", "numpy")
        assert SECRET.split("-")[0] not in line and "127.0.0.1" in line, line
    # and as a real command prints it
    p = arbiter(env, "tune", tmp_path / "one.toml", "--lanes", "numpy", "--db", URLS[1])
    assert SECRET.split("-")[0] not in one_line_error(p, "database")


@pytest.mark.parametrize("url", URLS)
def test_a_masked_url_keeps_everything_but_the_credential(url):
    shown = _errors.masked_url(url)
    assert SECRET not in shown and "***" in shown and "127.0.0.1:1/x" in shown
    assert SECRET not in _errors.one_line(f"database {url!r}: refused", url)
    assert SECRET not in _errors.one_line(f"database {url}: refused\nmore", url)


def test_masking_leaves_urls_without_credentials_alone():
    for url in ("sqlite:////tmp/a.db", "postgresql://h:5432/db", "postgresql://u@h/db?sslmode=x"):
        assert _errors.masked_url(url) == url
        assert _errors.one_line(f"database {url}: no", url) == f"database {url}: no"


# --- 10: budget = inf in a spec, and JSON that is JSON ----------------------------------------

@pytest.mark.parametrize("budget", ["inf", "+inf", "nan", "-1e-3", "0"])
def test_a_spec_budget_that_passes_everything_is_refused_like_the_flag(tmp_path, capsys,
                                                                       budget):
    spec = tmp_path / "s.toml"
    spec.write_text(ONE + f"budget = {budget}\n")
    db = ("--db", f"sqlite:///{tmp_path / 'a.db'}")
    for args in (("tune", *db), ("check",)):
        main_error(capsys, args[0], spec, "--json", *args[1:],
                   needle="budget must be a positive number")


def test_json_output_never_holds_infinity_or_nan():
    from arbiter._json import dumps
    from arbiter.cli._table import json_text

    def strict(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    rows = [{"a": math.inf, "b": [-math.inf, math.nan, 1.5], "c": {"d": float("nan")}}]
    for text in (json_text(rows), dumps(rows)):
        back = json.loads(text, parse_constant=strict)
        assert back[0]["a"] is None and back[0]["b"] == [None, None, 1.5]
        assert back[0]["c"]["d"] is None


# --- 11: one line, not a traceback ------------------------------------------------------------

def test_a_zero_byte_npz_is_one_line(env, tmp_path):
    (tmp_path / "in.npz").write_bytes(b"")
    p = arbiter(env, "run", EXAMPLES, "mm_relu", "--lane", "numpy", "--inputs",
                tmp_path / "in.npz", "--output", tmp_path / "o.npz")
    one_line_error(p, "not a readable .npz file")
    assert not (tmp_path / "o.npz").exists()


def test_db_upgrade_of_a_newer_schema_is_one_line(env, tmp_path):
    arbiter(env, "db", "upgrade")
    for revision in ("9999", "zz_from_the_future"):
        with sqlite3.connect(tmp_path / "arbiter.db") as con:
            con.execute("update arbiter_alembic_version set version_num = ?", (revision,))
        p = arbiter(env, "db", "upgrade")
        one_line_error(p, f"is at schema {revision}, which this arbiter")
        assert "upgrade arbiter" in p.stderr


@pytest.mark.slow
def test_tune_on_a_database_with_zeroed_pages_is_one_line(env, tmp_path):
    spec = tmp_path / "one.toml"
    spec.write_text(ONE)
    assert arbiter(env, "tune", spec, "--lanes", "numpy").returncode == 0
    db = tmp_path / "arbiter.db"
    with sqlite3.connect(db) as con:
        size = con.execute("pragma page_size").fetchone()[0]
        pages = [r for (r,) in con.execute(
            "select rootpage from sqlite_master where name in ('measurements', 'candidates', "
            "'ix_measurements_candidate', 'winners')")]
    con.close()
    with open(db, "r+b") as f:  # what a torn write or a bad sector leaves
        for page in pages:
            f.seek((page - 1) * size)
            f.write(b"\0" * size)
    spec.write_text(ONE.replace('"bias"', '"relu"'))  # a new region: writes
    one_line_error(arbiter(env, "tune", spec, "--lanes", "numpy"), "database disk image")
    for args in (["best", spec], ["report", "--no-measure", "--out", tmp_path / "r"]):
        p = arbiter(env, *args)  # what still reads answers; what does not says so
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) <= 1


def test_a_reader_that_leaves_early_gets_no_traceback(env):
    # off a terminal stdout is a buffer written at exit, after the reader has gone
    env = {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}
    for args in (["lanes"], ["lanes", "--json"]):
        read, write = os.pipe()
        os.close(read)
        try:
            p = subprocess.run([sys.executable, "-m", "arbiter", *args], env=env, cwd=ROOT,
                               stdout=write, stderr=subprocess.PIPE, text=True, timeout=120)
        finally:
            os.close(write)
        assert p.returncode == 141 and p.stderr == "", p.stderr


def measured(env, *args) -> tuple[int, str, int]:
    """`arbiter *args`: its exit code, its stderr, and its peak memory in MiB."""
    p = subprocess.Popen([sys.executable, "-m", "arbiter", *map(str, args)], env=env, cwd=ROOT,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _, status, usage = os.wait4(p.pid, 0)
        return os.waitstatus_to_exitcode(status), p.stderr.read(), usage.ru_maxrss >> 10
    finally:
        p.kill()
        p.stderr.close()


def test_a_spec_that_never_ends_is_refused_after_a_bounded_read(env, tmp_path):
    *_, baseline = measured(env, "check", tmp_path / "missing.toml")
    code, err, peak = measured(env, "check", "/dev/zero")
    assert code == 2 and err.count("\n") == 1, err
    assert "/dev/zero: larger than" in err and "not a spec file" in err
    assert peak < baseline + 100  # the read stopped (an endless one takes every byte there is)


# --- 7: an npz that declares more than it holds ------------------------------------------------

def _bomb(path: Path, shape: tuple[int, ...]) -> None:
    """An npz whose A declares `shape` (float32), its zeros compressing to almost nothing."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    zeros = b"\0" * (1 << 24)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("A.npy", "w", force_zip64=True) as f:
            f.write(header.getvalue())
            left = math.prod(shape) * 4
            while left:
                f.write(zeros[:min(left, len(zeros))])
                left -= min(left, len(zeros))


def test_an_npz_decompression_bomb_is_refused_before_its_data_is_read(env, tmp_path):
    small, bomb = tmp_path / "small.npz", tmp_path / "in.npz"
    _bomb(small, (16, 16))
    _bomb(bomb, (16000, 16000))  # 1 GiB of float32 in a file of about 1 MB
    assert bomb.stat().st_size < 2 << 20
    run = ("run", EXAMPLES, "mm_relu", "--lane", "numpy", "--output", tmp_path / "o.npz")
    *_, baseline = measured(env, *run, "--inputs", small)
    code, err, peak = measured(env, *run, "--inputs", bomb)
    assert code == 2 and err.count("\n") == 1, err
    assert "input 'A' has shape (16000, 16000), need (256, 256)" in err
    assert peak < baseline + 200  # MiB: the 1 GiB array was never made
    assert not (tmp_path / "o.npz").exists()


@pytest.mark.parametrize("member, needle", [
    ("A.npy:<f8", "input 'A' has dtype float64, need float32"),
    ("A.npy:|O", "input 'A' has dtype object"),  # a pickle: never loaded
    ("notes.txt", "not an .npz file of named arrays"),
])
def test_each_npz_member_is_checked_by_its_header(env, tmp_path, member, needle):
    ins = tmp_path / "in.npz"
    name, _, descr = member.partition(":")
    with zipfile.ZipFile(ins, "w") as z:
        header = io.BytesIO()
        if descr:
            np.lib.format.write_array_header_1_0(
                header, {"descr": descr, "fortran_order": False, "shape": (256, 256)})
        z.writestr(name, header.getvalue() + b"\0" * 64)
    p = arbiter(env, "run", EXAMPLES, "mm_relu", "--lane", "numpy", "--inputs", ins,
                "--output", tmp_path / "o.npz")
    one_line_error(p, needle)


def test_run_still_takes_its_own_output_as_inputs(env, tmp_path):
    first, second = tmp_path / "o.npz", tmp_path / "o2.npz"
    assert arbiter(env, "run", EXAMPLES, "mm_relu", "--lane", "numpy", "--inputs",
                   tmp_path / "in.npz", "--output", first).returncode == 0
    p = arbiter(env, "run", EXAMPLES, "mm_relu", "--lane", "numpy", "--inputs", first,
                "--output", second)
    assert p.returncode == 0 and "drawn inputs: none" in p.stdout, p.stderr
    with np.load(first) as a, np.load(second) as b:
        assert np.array_equal(a["out"], b["out"])
