"""Failures the environment caused are not the candidate's, for good (issue 41, item 3): a
timeout from a too-small --timeout, a build on a full disk, a worker killed by someone else.
Each is recorded with its cause and measured again by a later run, when a longer timeout is
allowed or at once (the disk may be freed, no one may kill it then); a failure of the
candidate's own is never measured twice."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arbiter.lane import Status
from tests import fake_lanes, faulty_lanes

ROOT = Path(__file__).resolve().parents[1]
ONE = '[[region]]\nname = "r"\nM = 8\nN = 16\nK = 8\nepilogue = ["bias"]\n'


@pytest.fixture
def env(tmp_path):
    (tmp_path / "one.toml").write_text(ONE)
    return dict(os.environ, ARBITER_CACHE_DIR=str(tmp_path / "cache"),
                ARBITER_DB=f"sqlite:///{tmp_path / 'arbiter.db'}",
                PYTHONPATH=fake_lanes.pythonpath(),
                ARBITER_EXTRA_LANES=f"{fake_lanes.extra_lanes()},{faulty_lanes.extra_lanes()}",
                OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")


def tune(env, tmp_path, *args, check=True) -> dict:
    p = subprocess.run([sys.executable, "-m", "arbiter", "tune", str(tmp_path / "one.toml"),
                        "--json", *map(str, args)], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    if check:
        assert p.returncode in (0, 1) and "Traceback" not in p.stderr, p.stderr[-3000:]
    [row] = json.loads(p.stdout)
    return row


def measured(tmp_path, lane: str) -> list[tuple[str, str | None, float | None]]:
    """(status, cause, timeout) of each sweep measurement of `lane`'s candidates, in order."""
    with sqlite3.connect(tmp_path / "arbiter.db") as con:
        return con.execute(
            "select m.status, m.cause, m.timeout from measurements m join candidates c on "
            "c.id = m.candidate_id join lanes l on l.id = c.lane_id where l.name = ? and "
            "m.kind = 'sweep' order by m.id", (lane,)).fetchall()


@pytest.mark.slow
def test_a_timeout_under_a_too_small_timeout_is_retried_when_more_time_is_allowed(env, tmp_path):
    env = dict(env, FAKE_SLEEP="2")
    row = tune(env, tmp_path, "--lanes", "fake_sleepy", "--timeout", "0.5")
    assert row["lane"] is None and row["status"] == "no candidate within budget"
    assert measured(tmp_path, "fake_sleepy") == [("timeout", None, 0.5)]
    # the same timeout again: the same verdict stands, nothing is measured twice
    assert tune(env, tmp_path, "--lanes", "fake_sleepy", "--timeout", "0.5")["new_trials"] == 0
    row = tune(env, tmp_path, "--lanes", "fake_sleepy", "--timeout", "60")
    assert row["lane"] == "fake_sleepy" and row["new_trials"] == 1
    assert measured(tmp_path, "fake_sleepy") == [("timeout", None, 0.5), ("ok", None, 60.0)]
    # a shorter timeout later does not undo what a longer one measured
    assert tune(env, tmp_path, "--lanes", "fake_sleepy", "--timeout", "0.5")["new_trials"] == 0


def memory_limits(tmp_path, lane: str) -> list[tuple[str, int | None]]:
    """(status, memory limit in bytes) of each sweep measurement of `lane`'s candidates."""
    with sqlite3.connect(tmp_path / "arbiter.db") as con:
        return con.execute(
            "select m.status, m.memory_limit from measurements m join candidates c on "
            "c.id = m.candidate_id join lanes l on l.id = c.lane_id where l.name = ? and "
            "m.kind = 'sweep' order by m.id", (lane,)).fetchall()


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="Linux's /proc")
def test_out_of_memory_under_a_small_limit_is_retried_when_the_limit_grows(env, tmp_path):
    env = dict(env, FAKE_HOG_BYTES=str(512 << 20), FAKE_HOG_SECONDS="0.5")
    small, large = dict(env, ARBITER_WORKER_MEMORY="256M"), dict(env, ARBITER_WORKER_MEMORY="2G")
    row = tune(small, tmp_path, "--lanes", "fake_hog")
    assert row["lane"] is None and row["statuses"] == {"out_of_memory": 1}
    assert memory_limits(tmp_path, "fake_hog") == [("out_of_memory", 256 << 20)]
    # the same limit again: the verdict stands, nothing is measured twice
    assert tune(small, tmp_path, "--lanes", "fake_hog")["new_trials"] == 0
    row = tune(large, tmp_path, "--lanes", "fake_hog")
    assert row["lane"] == "fake_hog" and row["new_trials"] == 1
    assert memory_limits(tmp_path, "fake_hog") == [("out_of_memory", 256 << 20),
                                                   ("ok", 2 << 30)]
    # a smaller limit later does not undo what a larger one measured
    assert tune(small, tmp_path, "--lanes", "fake_hog")["new_trials"] == 0


def test_a_build_on_a_full_disk_is_retried_and_a_broken_one_is_not(env, tmp_path):
    full = tmp_path / "disk-full"
    full.touch()
    env = dict(env, FAKE_DISK_FULL=str(full))
    lanes = ("--lanes", "fake_disk_full,fake_broken_build")
    row = tune(env, tmp_path, *lanes)
    assert row["lane"] is None and row["status"] == "no candidate within budget"
    assert measured(tmp_path, "fake_disk_full") == [("compile_failed", "ENOSPC", 60.0)]
    full.unlink()  # space freed
    row = tune(env, tmp_path, *lanes)
    assert row["lane"] == "fake_disk_full" and row["new_trials"] == 1
    assert [s for s, *_ in measured(tmp_path, "fake_disk_full")] == ["compile_failed", "ok"]
    # the compiler's own error is the candidate's: recorded once, never built again
    assert measured(tmp_path, "fake_broken_build") == [("compile_failed", None, 60.0)]


def test_a_worker_killed_from_outside_is_retried_and_a_segfault_is_not(env, tmp_path):
    block = tmp_path / "block"
    block.touch()
    env = dict(env, FAKE_BLOCK=str(block))
    argv = [sys.executable, "-m", "arbiter", "tune", str(tmp_path / "one.toml"), "--json",
            "--lanes", "fake_blocked,fake_segfault"]
    p = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    pid_file = Path(f"{block}.pid")
    deadline = time.monotonic() + 120
    while not pid_file.exists():
        assert time.monotonic() < deadline and p.poll() is None, p.stderr.read() if p.poll() \
            is not None else "the blocked run never started"
        time.sleep(0.05)
    time.sleep(0.1)
    os.kill(int(pid_file.read_text()), signal.SIGKILL)  # someone else's kill (or the OOM killer)
    block.unlink()
    out, err = p.communicate(timeout=120)
    assert "Traceback" not in err, err
    [row] = json.loads(out)
    assert row["lane"] is None
    assert measured(tmp_path, "fake_blocked") == [("crashed", "SIGKILL", 60.0)]
    assert measured(tmp_path, "fake_segfault") == [("crashed", None, 60.0)]
    row = tune(env, tmp_path, "--lanes", "fake_blocked,fake_segfault")
    assert row["lane"] == "fake_blocked" and row["new_trials"] == 1
    assert [s for s, *_ in measured(tmp_path, "fake_blocked")] == ["crashed", "ok"]
    assert measured(tmp_path, "fake_segfault") == [("crashed", None, 60.0)]  # its own crash


def test_a_finalist_the_environment_failed_in_its_rounds_gets_its_rounds_again(env, tmp_path):
    from arbiter.measure import Measurement
    from arbiter.records import FINAL, Records

    row = tune(env, tmp_path, "--lanes", "fake_tiny", "--trials", "4")
    assert row["lane"] == "fake_tiny"
    records = Records(env["ARBITER_DB"])
    with sqlite3.connect(tmp_path / "arbiter.db") as con:
        [(region_id, env_id, lane_id)] = con.execute(
            "select distinct region_id, environment_id, lane_id from candidates").fetchall()
    winner = next(r for r in records.results(region_id, env_id)
                  if r.config.as_dict() == row["config"])
    finals = len(records.results(region_id, env_id, FINAL))
    # its last re-timing: a worker killed by someone else
    records.record(region_id, env_id, lane_id, winner.config,
                   Measurement(Status.CRASHED, log="worker killed by SIGKILL", cause="SIGKILL"),
                   winner.budget, FINAL)
    again = tune(env, tmp_path, "--lanes", "fake_tiny", "--trials", "4")
    assert again["new_trials"] == 0 and again["config"] == row["config"]
    latest = {r.candidate_id: r for r in records.results(region_id, env_id, FINAL)}
    assert latest[winner.candidate_id].status is Status.OK  # re-timed, not left out
    assert len(latest) >= finals
    # and once its rounds passed, a run with nothing new re-times nothing
    with sqlite3.connect(tmp_path / "arbiter.db") as con:
        before = con.execute("select count(*) from measurements").fetchone()[0]
    tune(env, tmp_path, "--lanes", "fake_tiny", "--trials", "4")
    with sqlite3.connect(tmp_path / "arbiter.db") as con:
        assert con.execute("select count(*) from measurements").fetchone()[0] == before


@pytest.mark.parametrize("status, log, cause", [
    (Status.COMPILE_FAILED, "cc1: fatal error: error writing to /tmp/ccX.s: No space left on "
     "device", "ENOSPC"),
    (Status.COMPILE_FAILED, "gcc: fatal error: Killed signal terminated program cc1", "SIGKILL"),
    (Status.COMPILE_FAILED, "as: /cache/x.o: File size limit exceeded", "SIGXFSZ"),
    (Status.COMPILE_FAILED, "kernel.c:1:1: error: expected ';'", None),
    (Status.LAUNCH_FAILED, "OSError: [Errno 122] Disk quota exceeded", "EDQUOT"),
    (Status.LAUNCH_FAILED, "OSError: cannot open shared object file: No such file", None),
    (Status.CRASHED, "worker killed by SIGTERM\n", "SIGTERM"),
    (Status.CRASHED, "finalists' re-timing: worker killed by SIGKILL", "SIGKILL"),
    (Status.CRASHED, "worker killed by SIGSEGV\nFatal Python error", None),
    (Status.CRASHED, "worker exited with code 3", None),
    (Status.TIMEOUT, "no result after 1 s; worker killed", None),
    (Status.WRONG_RESULT, "No space left on device", None),  # judged: never the environment
    (Status.OK, "", None),
])
def test_what_the_environment_did_is_told_from_what_the_candidate_did(status, log, cause):
    from arbiter.measure import environment_cause

    assert environment_cause(status, log) == cause


def test_older_records_get_their_causes_from_their_logs(tmp_path):
    from sqlalchemy import text

    from arbiter.records import Records, session_scope, upgrade

    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0006")
    rows = [("timeout", "no result after 0.5 s (+4 s for a busy machine); worker killed"),
            ("crashed", "worker killed by SIGKILL\n"), ("crashed", "worker killed by SIGSEGV"),
            ("compile_failed", "error writing: No space left on device"), ("ok", ""),
            ("out_of_memory", "the worker held 0.51 GiB, over its limit of 0.38 GiB "
             "(ARBITER_WORKER_MEMORY); worker killed\n")]
    with session_scope(url) as s:
        s.execute(text("insert into regions (id, key, name, kind, canonical, created_at) "
                       "values (1, 'k', 'r', 'fused', '{}', '2026-01-01')"))
        s.execute(text("insert into environments (id, fingerprint, details, created_at) "
                       "values (1, 'f', '{}', '2026-01-01')"))
        s.execute(text("insert into lanes (id, name, version, platform) values "
                       "(1, 'x', '1', 'cpu')"))
        for i, (status, log) in enumerate(rows, 1):
            s.execute(text("insert into candidates (id, region_id, environment_id, lane_id, "
                           "config_key, config, created_at) values (:i, 1, 1, 1, :k, '{}', "
                           "'2026-01-01')"), {"i": i, "k": f"c{i}"})
            s.execute(text("insert into measurements (candidate_id, kind, status, budget, "
                           "samples, timing_method, compile_seconds, log, created_at) values "
                           "(:i, 'sweep', :s, 0.001, '[]', '', 0, :log, '2026-01-01')"),
                      {"i": i, "s": status, "log": log})
    upgrade(url)
    with sqlite3.connect(tmp_path / "old.db") as con:
        got = con.execute("select status, cause, timeout from measurements order by id").fetchall()
    assert got == [("timeout", None, 0.5), ("crashed", "SIGKILL", None), ("crashed", None, None),
                   ("compile_failed", "ENOSPC", None), ("ok", None, None),
                   ("out_of_memory", None, None)]
    # the limit an out_of_memory ran under, as the most its rounded words can mean: the same
    # limit (384 MiB, "0.38 GiB") is not more, 1 GiB or none is
    [oom] = [r for r in Records(url).results(1, 1) if r.status is Status.OUT_OF_MEMORY]
    assert oom.memory_limit == int(0.385 * (1 << 30))
    assert not oom.retried(60, 384 << 20)
    assert oom.retried(60, 1 << 30) and oom.retried(60, None)


def test_a_tune_killed_mid_sweep_is_not_waited_for_by_the_next(env, tmp_path):
    """Its lease on the region it was sweeping stays in the records; the next tune on this
    machine sees its holder has ended and takes it at once (it waited 60 s for it to go
    silent: a kill cost every resume a minute)."""
    env = dict(env, FAKE_SLEEP="0.05")
    argv = [sys.executable, "-m", "arbiter", "tune", str(tmp_path / "one.toml"), "--json",
            "--lanes", "fake_slowish", "--trials", "18"]
    p = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    def started() -> bool:
        try:
            return len(measured(tmp_path, "fake_slowish")) >= 3
        except sqlite3.OperationalError:  # (its tables not made yet)
            return False

    deadline = time.monotonic() + 120
    while not started():
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    with sqlite3.connect(tmp_path / "arbiter.db") as con:
        [(holder,)] = con.execute("select holder from leases").fetchall()
    assert holder and holder.split(":")[1] == str(p.pid)  # (the dead tune's)
    start = time.monotonic()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "being swept by" not in done.stderr and time.monotonic() - start < 50
    assert json.loads(done.stdout)[0]["config"] == {"block": 4, "fast": False, "unroll": 2}
