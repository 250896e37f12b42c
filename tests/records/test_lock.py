"""One sweep at a time on a SQLite file, whatever name the file is reached by: the lock is the
file's own (issue 41, items 2 and 5)."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from arbiter.records import _lock, one_sweep
from tests import fake_lanes

ROOT = Path(__file__).resolve().parents[2]
SPEC = '[[region]]\nname = "r"\nM = 8\nN = 16\nK = 8\nepilogue = ["bias"]\n'


@pytest.fixture
def env(tmp_path):
    return dict(os.environ, ARBITER_EXTRA_LANES=fake_lanes.extra_lanes(),
                PYTHONPATH=fake_lanes.pythonpath(), ARBITER_CACHE_DIR=str(tmp_path / "cache"),
                ARBITER_DB=f"sqlite:///{tmp_path / 'arbiter.db'}", OPENBLAS_NUM_THREADS="1",
                OMP_NUM_THREADS="1")


def sweep_running(db: Path) -> bool:
    """Does a process hold the sweep lock of the file at `db`?"""
    try:
        fd = os.open(db, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        if not _lock._OFD:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False
        got = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, struct.pack(
            "hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, _lock.LOCK_BYTE, 1, 0))
        return struct.unpack("hhqqi4x", got)[0] != fcntl.F_UNLCK
    finally:
        os.close(fd)


def measured(db: Path) -> list[tuple]:
    con = sqlite3.connect(db, timeout=30)
    try:
        return con.execute("select c.id, c.config_key, m.id from candidates c join measurements "
                           "m on m.candidate_id = c.id where m.kind = 'sweep'").fetchall()
    finally:
        con.close()


@pytest.mark.parametrize("how", [pytest.param("same path", marks=pytest.mark.slow),
                                 pytest.param("symlink", marks=pytest.mark.slow), "hard link"])
def test_a_second_sweep_on_one_file_waits_whatever_name_it_uses(env, tmp_path, how):
    """The same SQLite file through a symlink is the same database: the second tune waits
    for the first and measures nothing twice. Through a hard link (in another folder) it is
    refused at once, in one line (`test_a_file_with_several_hard_links_is_refused`), and
    measures nothing either."""
    spec = tmp_path / "one.toml"
    spec.write_text(SPEC)
    db = tmp_path / "arbiter.db"
    env = dict(env, FAKE_BUILD_SECONDS="2")  # each of the first sweep's builds
    argv = [sys.executable, "-m", "arbiter", "tune", str(spec), "--lanes", "fake_slow_build",
            "--trials", "3", "--json"]
    first = subprocess.Popen([*argv, "--db", f"sqlite:///{db}"], env=env, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not sweep_running(db) and first.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    other = db
    if how != "same path":
        (tmp_path / "elsewhere").mkdir()
        other = tmp_path / "elsewhere" / "other.db"
        if how == "symlink":
            other.symlink_to(db)
        else:
            os.link(db, other)
    second = subprocess.run([*argv, "--db", f"sqlite:///{other}"], env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    if how == "hard link":
        assert second.returncode == 2 and second.stderr.count("\n") == 1, second.stderr
        assert "2 names (hard links)" in second.stderr
        assert first.poll() is None  # (refused while the first still sweeps)
        other.unlink()
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert "Traceback" not in second.stderr
    [mine] = json.loads(out)
    # (new_trials counts configs the lane refuses too: 3 or more)
    assert mine["new_trials"] >= 3
    if how != "hard link":
        assert second.returncode == 0, second.stderr
        assert "another sweep is writing to" in second.stderr
        [theirs] = json.loads(second.stdout)
        assert theirs["new_trials"] == 0 and theirs["config"] == mine["config"]
    rows = measured(db)
    assert len(rows) == len({c for c, *_ in rows}) == mine["new_trials"]
    assert not list(tmp_path.glob("arbiter.db.lock*"))  # no file beside the database


def test_a_file_with_several_hard_links_is_refused(tmp_path):
    """SQLite names its write-ahead log after the name it opens: through a second hard link
    a process neither sees nor replays the first name's log (tests/test_faults.py shows the
    records a kill then loses). Every way in refuses such a file, in one line, and writes
    nothing; with one name again it opens."""
    from arbiter import ArbiterError
    from arbiter.records import Records, close_engines, upgrade

    db, link = tmp_path / "a.db", tmp_path / "b.db"
    upgrade(f"sqlite:///{db}")
    close_engines()  # (as a new process finds it; one that had it open goes on)
    os.link(db, link)
    for url in (f"sqlite:///{db}", f"sqlite:///{link}"):
        for open_it in (Records, lambda u: Records(u, create=False), upgrade):
            with pytest.raises(ArbiterError, match=r"2 names \(hard links\).*keep one name"):
                open_it(url)
        with pytest.raises(ArbiterError, match="hard links"), one_sweep(url):
            pass
    assert not list(tmp_path.glob("*-wal")) and not list(tmp_path.glob("*-journal"))
    link.unlink()
    Records(f"sqlite:///{db}")


def test_sweeps_of_one_process_take_turns_on_one_file_by_any_name(tmp_path):
    db = tmp_path / "a.db"
    (tmp_path / "elsewhere").mkdir()
    link = tmp_path / "elsewhere" / "b.db"
    db.touch()
    link.symlink_to(db)
    order: list[str] = []
    inside = threading.Event()

    def second() -> None:
        inside.wait()
        with one_sweep(f"sqlite:///{link}"):
            order.append("second")

    t = threading.Thread(target=second)
    t.start()
    with one_sweep(f"sqlite:///{db}"):
        inside.set()
        time.sleep(0.3)
        order.append("first")
    t.join(10)
    assert order == ["first", "second"]


def test_the_lock_follows_no_symlink_and_truncates_nothing(env, tmp_path):
    """A `<db>.lock` planted as a symlink to a file the user can write: a tune neither writes
    through it nor removes it."""
    spec = tmp_path / "one.toml"
    spec.write_text(SPEC)
    victim = tmp_path / "precious.txt"
    victim.write_text("precious\n")
    planted = tmp_path / "arbiter.db.lock"
    planted.symlink_to(victim)
    p = subprocess.run([sys.executable, "-m", "arbiter", "tune", str(spec), "--lanes", "numpy",
                        "--trials", "1"], env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert victim.read_text() == "precious\n"
    assert planted.is_symlink() and os.readlink(planted) == str(victim)
