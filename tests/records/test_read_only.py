"""A database this user may only read answers `best`, `run` and `report` (issue 41, item 4):
a query never needs write access, and leaves no file beside the database."""

from __future__ import annotations

import ctypes
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import fake_lanes

ROOT = Path(__file__).resolve().parents[2]
SPEC = '[[region]]\nname = "r"\nM = 8\nN = 16\nK = 8\nepilogue = ["bias"]\n'


def _as_a_reader() -> None:
    """In the child, before it runs arbiter: root gives up the capabilities that let it write
    what it may not (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER), so file modes hold
    for it as for any user."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (1, 2, 3):
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                os._exit(99)


def arbiter(env, *args, reader=False):
    return subprocess.run([sys.executable, "-m", "arbiter", *map(str, args)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=300,
                          preexec_fn=_as_a_reader if reader else None)


@pytest.fixture
def tuned(tmp_path):
    """A tuned database in a folder of its own, and the environment to reach it."""
    folder = tmp_path / "shared"
    folder.mkdir()
    spec = tmp_path / "one.toml"
    spec.write_text(SPEC)
    env = dict(os.environ, ARBITER_EXTRA_LANES=fake_lanes.extra_lanes(),
               PYTHONPATH=fake_lanes.pythonpath(), ARBITER_CACHE_DIR=str(tmp_path / "cache"),
               ARBITER_DB=f"sqlite:///{folder / 'arbiter.db'}", OPENBLAS_NUM_THREADS="1",
               OMP_NUM_THREADS="1")
    p = arbiter(env, "tune", spec, "--lanes", "numpy", "--trials", "1")
    assert p.returncode == 0, p.stderr
    probe = arbiter(env, "lanes", reader=True)
    if probe.returncode == 99:
        pytest.skip("root cannot give up its file-access capabilities here")
    yield env, spec, folder
    folder.chmod(0o755)


@pytest.mark.parametrize("folder_writable", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_best_run_and_report_read_a_database_they_may_not_write(tuned, tmp_path,
                                                                folder_writable):
    env, spec, folder = tuned
    db = folder / "arbiter.db"
    db.chmod(0o444)
    folder.chmod(0o755 if folder_writable else 0o555)
    before = sorted(p.name for p in folder.iterdir())
    p = arbiter(env, "best", spec, "--json", reader=True)
    assert p.returncode == 0, p.stderr
    [row] = json.loads(p.stdout)
    assert row["lane"] == "numpy" and row["status"] == "ok"
    out = tmp_path / "out.npz"
    p = arbiter(env, "run", spec, "r", "--inputs", tmp_path / "in.npz", "--output", out,
                reader=True)
    assert p.returncode == 0, p.stderr
    with np.load(out) as z:
        assert z["out"].shape == (8, 16)
    p = arbiter(env, "report", "--out", tmp_path / "report", reader=True)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "report" / "index.html").exists() or list((tmp_path / "report").iterdir())
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing made beside it
    # a tune must write: one line saying it cannot
    p = arbiter(env, "tune", spec, "--lanes", "numpy", "--trials", "2", reader=True)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "readonly database" in lines[0], p.stderr


def test_a_reader_sees_what_a_writer_committed_and_has_not_yet_folded_in(tuned):
    """While a writer has the file open in WAL mode, a read-only reader reads its log too."""
    env, spec, folder = tuned
    db = folder / "arbiter.db"
    writer = sqlite3.connect(db)
    try:
        assert writer.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        writer.execute("PRAGMA wal_autocheckpoint=0")
        [(was,)] = writer.execute("SELECT latency FROM winners").fetchall()
        writer.execute("UPDATE winners SET latency = latency * 2")
        writer.commit()
        assert (folder / "arbiter.db-wal").stat().st_size > 0
        db.chmod(0o444)
        folder.chmod(0o555)
        p = arbiter(env, "best", spec, "--json", reader=True)
        assert p.returncode == 0, p.stderr
        [row] = json.loads(p.stdout)
        assert row["latency_ms"] == pytest.approx(2 * was * 1e3)
    finally:
        folder.chmod(0o755)
        writer.close()
