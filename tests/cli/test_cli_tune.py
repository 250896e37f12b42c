"""`arbiter tune / best / run / db` end to end, including a sweep killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from tests import fake_lanes

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "regions.toml"


@pytest.fixture
def env(tmp_path):
    e = dict(os.environ, ARBITER_EXTRA_LANES=fake_lanes.extra_lanes(),
             PYTHONPATH=fake_lanes.pythonpath(), ARBITER_CACHE_DIR=str(tmp_path / "cache"),
             ARBITER_DB=f"sqlite:///{tmp_path / 'arbiter.db'}", OPENBLAS_NUM_THREADS="1",
             OMP_NUM_THREADS="1")
    return e


def arbiter(env, *args, check=True):
    p = subprocess.run([sys.executable, "-m", "arbiter", *map(str, args)], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}: {p.stderr}")
    return p


def test_tune_best_run_on_the_examples(env, tmp_path):
    p = arbiter(env, "tune", EXAMPLES, "--lanes", "numpy", "--trials", "1", "--json")
    rows = json.loads(p.stdout)
    assert len(rows) == 9 and all(r["lane"] == "numpy" and r["status"] == "ok" for r in rows)
    table = arbiter(env, "tune", EXAMPLES, "--lanes", "numpy", "--trials", "1").stdout
    assert table.splitlines()[0].split()[:5] == ["region", "dtype", "lane", "config", "precision"]
    best = json.loads(arbiter(env, "best", EXAMPLES, "--json").stdout)
    assert [b["region"] for b in best] == [r["region"] for r in rows]
    for b in best:
        assert {"region", "lane", "config", "latency_ms", "rel_error", "status"} <= set(b)
    out = tmp_path / "out.npz"
    msg = arbiter(env, "run", EXAMPLES, "mm_relu", "--inputs", tmp_path / "in.npz",
                  "--output", out).stdout
    assert "recorded winner lane numpy" in msg
    with np.load(out) as z:
        assert z["out"].shape == (256, 256) and np.isfinite(z["out"]).all()


def test_each_command_closes_the_database_before_it_ends(env, tmp_path):
    # the command freezes its objects for a quick exit: the connections, ours and Optuna's,
    # are closed first, so SQLite folds its write-ahead log into the file and removes it
    spec = tmp_path / "one.toml"
    spec.write_text('[[region]]\nname = "r"\nM = 8\nN = 16\nK = 8\nepilogue = ["bias"]\n')
    arbiter(env, "tune", spec, "--lanes", "numpy", "--trials", "2")
    assert not list(tmp_path.glob("arbiter.db-*"))
    arbiter(env, "export", "optuna")
    assert not list(tmp_path.glob("arbiter.db-*"))
    with closing(sqlite3.connect(tmp_path / "arbiter.db")) as conn:  # Optuna's was open too
        assert conn.execute("SELECT COUNT(*) FROM studies").fetchone()[0] == 1
    assert "r" in arbiter(env, "best", spec).stdout
    assert not list(tmp_path.glob("arbiter.db-*"))


@pytest.mark.parametrize("args, text", [
    (["tune", "missing.toml"], "no such spec file"),
    (["tune", EXAMPLES, "--trials", "0"], "--trials must be at least 1"),
    (["tune", EXAMPLES, "--sampler", "annealing", "--lanes", "numpy"], "unknown sampler"),
    (["tune", EXAMPLES, "--lanes", "nope"], "unknown lane 'nope'"),
    (["best", EXAMPLES, "mm_relu"], "never tuned"),
    (["best", EXAMPLES, "no_such_region"], "no region named"),
    (["tune", EXAMPLES, "--timeout", "nan"], "--timeout must be a number of seconds"),
    (["tune", EXAMPLES, "--timeout", "inf"], "--timeout must be a number of seconds"),
    (["tune", EXAMPLES, "--budget", "nan"], "--budget must be a positive number"),
    (["tune", EXAMPLES, "--budget=-1e-3"], "--budget must be a positive number"),
    (["tune", EXAMPLES, "--budget", "0"], "--budget must be a positive number"),
    (["best", EXAMPLES, "mm_relu", "--budget", "nan"], "--budget must be a positive number"),
    (["check", EXAMPLES, "--lanes", "numpy", "--budget", "inf"], "--budget must be a positive"),
    (["tune", EXAMPLES, "--lanes", "fake_tiny", "--exclude", "block=3"], "no lane swept offers"),
    (["tune", EXAMPLES, "--lanes", "fake_tiny,fake_bad_clock", "--where",
      "block > 1 and clock == 'ok'"], "no lane swept has all of block, clock"),
])
def test_bad_input_is_one_line_and_nonzero(env, args, text):
    if args[0] == "best":
        arbiter(env, "db", "upgrade")  # a database exists; the region asked is what is missing
    p = arbiter(env, *args, check=False)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("arbiter: error:") and text in lines[0]


@pytest.mark.parametrize("db", ["directory", "garbage", "postgresql://u:secretpw@127.0.0.1:1/x"])
def test_a_database_that_cannot_be_opened_is_one_line_without_its_password(env, tmp_path, db):
    if db == "directory":
        db = f"sqlite:///{tmp_path}"
    elif db == "garbage":
        (tmp_path / "g.db").write_text("not a database\n" * 100)
        db = f"sqlite:///{tmp_path / 'g.db'}"
    p = arbiter(env, "tune", EXAMPLES, "--lanes", "numpy", "--db", db, check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("arbiter: error:") and "database" in lines[0]
    assert "secretpw" not in p.stderr and "Traceback" not in p.stderr


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_tune_ended_by_a_signal_takes_its_hung_worker_with_it(env, tmp_path, sig):
    spec = tmp_path / "one.toml"
    spec.write_text('[[region]]\nname = "r"\nM = 8\nN = 16\nK = 8\nepilogue = ["bias"]\n')
    p = subprocess.Popen([sys.executable, "-m", "arbiter", "tune", str(spec), "--lanes",
                          "fake_hang", "--trials", "1", "--timeout", "60"], env=env, cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def workers() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if (entry.name.isdigit() and b"arbiter.measure._child"
                        in (entry / "cmdline").read_bytes()
                        and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                        == p.pid):
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                pass
        return found

    deadline = time.monotonic() + 60
    while not workers():
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.05)
    worker = workers()[0]
    time.sleep(1.0)  # into the hung kernel's verification run
    p.send_signal(sig)
    p.communicate(timeout=30)
    assert p.returncode == (-9 if sig == signal.SIGKILL else 128 + sig)

    def gone() -> bool:
        try:
            return (Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[0]
                    == "Z")
        except OSError:
            return True

    deadline = time.monotonic() + 10
    while not gone():
        assert time.monotonic() < deadline, "the hung worker outlived its parent"
        time.sleep(0.05)


def test_best_on_a_database_that_does_not_exist_leaves_no_file_behind(env, tmp_path):
    p = arbiter(env, "best", EXAMPLES, "mm_relu", "--db", f"sqlite:///{tmp_path / 'no.db'}",
                check=False)
    assert p.returncode == 2 and "no such file" in p.stderr
    assert not (tmp_path / "no.db").exists()


@pytest.mark.slow
def test_optuna_tables_of_another_optuna_are_one_line_at_export_and_the_records_stay(
        env, tmp_path):
    first, second = tmp_path / "first.toml", tmp_path / "second.toml"
    first.write_text('[[region]]\nname = "a"\nM = 8\nN = 16\nK = 8\nepilogue = ["relu"]\n')
    second.write_text('[[region]]\nname = "b"\nM = 8\nN = 16\nK = 8\nepilogue = ["bias", "relu"]\n')
    arbiter(env, "tune", first, "--lanes", "numpy", "--trials", "1")
    arbiter(env, "export", "optuna")
    db = tmp_path / "arbiter.db"
    con = sqlite3.connect(db)
    con.execute("update alembic_version set version_num = 'v99.0.0.a'")
    con.commit()
    con.close()
    arbiter(env, "tune", second, "--lanes", "numpy,fake_tiny", "--trials", "3")  # no Optuna
    p = arbiter(env, "export", "optuna", check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("arbiter: error: database") and "optuna" in lines[0]
    con = sqlite3.connect(db)
    assert con.execute("select count(*) from measurements where kind = 'sweep' "
                       "and status != 'invalid'").fetchone()[0] == 1 + 3
    con.close()


def _measured(db: Path) -> list[tuple]:
    con = sqlite3.connect(db, timeout=30)
    try:
        return con.execute("select c.id, c.config_key, m.id, m.status from candidates c join "
                           "measurements m on m.candidate_id = c.id where m.kind = 'sweep' "
                           "order by c.id").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()


def _killed_after(env, db: Path, n: int, *args) -> list[tuple]:
    """Start `arbiter *args`, SIGKILL it once `n` candidates are recorded; what was recorded."""
    proc = subprocess.Popen([sys.executable, "-m", "arbiter", *map(str, args)], env=env,
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_measured(db)) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return _measured(db)


def test_resume_after_sigkill_loses_nothing_and_repeats_nothing(env, tmp_path):
    spec = tmp_path / "one.toml"
    spec.write_text('[[region]]\nname = "r"\nM = 8\nN = 16\nK = 8\nepilogue = ["bias"]\n')
    db = tmp_path / "arbiter.db"
    before = _killed_after(env, db, 4, "tune", spec, "--lanes", "fake_slow", "--trials", "18",
                           "--seed", "0")
    assert 4 <= len(before) < 18, "the sweep should have been killed in the middle"
    p = arbiter(env, "tune", spec, "--lanes", "fake_slow", "--trials", "18", "--seed", "0",
                "--json")
    after = _measured(db)
    assert set(before) <= set(after)  # nothing completed was lost
    assert len(after) == 18 and len({c for c, *_ in after}) == 18  # no candidate twice
    [row] = json.loads(p.stdout)
    assert row["new_trials"] == 18 - len(before) and row["config"]["block"] == 4


@pytest.mark.slow  # the sampler's path of the test above (about a minute)
def test_sampled_sweep_killed_then_resumed_keeps_its_records_and_exports_them_once(env, tmp_path):
    import optuna

    spec = tmp_path / "one.toml"
    spec.write_text('[[region]]\nname = "r"\nM = 8\nN = 16\nK = 8\nepilogue = ["bias"]\n')
    db = tmp_path / "arbiter.db"
    # 12 of fake_slow's 18 valid configs: the sampler's path, next candidate asked ahead
    cmd = ["tune", str(spec), "--lanes", "fake_slow", "--trials", "12", "--seed", "1"]
    before = _killed_after(env, db, 5, *cmd)
    arbiter(env, *cmd)
    after = _measured(db)
    assert set(before) <= set(after) and len({c for c, *_ in after}) == len(after)
    with sqlite3.connect(db) as con:
        ran = con.execute("select count(*) from measurements where kind = 'sweep' and "
                          "status != 'invalid'").fetchone()[0]
    assert ran == 12  # the budget counts what really ran, across both runs
    # the exported study holds the records: each candidate once, none missing
    arbiter(env, "export", "optuna")
    url = f"sqlite:///{db}"
    [summary] = optuna.get_all_study_summaries(storage=url)
    trials = optuna.load_study(study_name=summary.study_name, storage=url).trials
    ids = sorted(t.user_attrs["candidate"] for t in trials)
    assert ids == sorted(c for c, _, _, status in after if status != "invalid")


@pytest.mark.slow
def test_sweeps_started_at_once_on_one_new_database_all_finish(env, tmp_path):
    # two shells starting on the same new arbiter.db: each meets the others' tables and rows
    # half made (ours, Optuna's) and must still finish, with no traceback
    import optuna

    spec = tmp_path / "two.toml"
    spec.write_text('[[region]]\nname = "a"\nM = 8\nN = 16\nK = 8\nepilogue = ["bias"]\n'
                    '[[region]]\nname = "b"\nM = 8\nN = 16\nK = 8\nepilogue = ["relu"]\n')
    code = ("import sys, time\nfrom arbiter.cli import main\n"
            "time.sleep(max(0.0, float(sys.argv[1]) - time.time()))\n"
            "sys.exit(main(sys.argv[2:]))")
    start = str(time.time() + 4)  # imports first, then all at the same instant
    procs = [subprocess.Popen(
        [sys.executable, "-c", code, start, "tune", str(spec), "--lanes", "fake_tiny",
         "--trials", "9", "--seed", str(seed), "--json"], env=env, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for seed in range(3)]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0 and "Traceback" not in err, err
        assert [r["region"] for r in json.loads(out)] == ["a", "b"]
    url = env["ARBITER_DB"]
    arbiter(env, "export", "optuna")
    with sqlite3.connect(url.removeprefix("sqlite:///")) as con:
        candidates = {c for (c,) in con.execute("select candidate_id from measurements where "
                                                "kind = 'sweep' and status != 'invalid'")}
    studied = {t.user_attrs["candidate"]
               for s in optuna.get_all_study_summaries(storage=url)
               for t in optuna.load_study(study_name=s.study_name, storage=url).trials}
    assert studied == candidates  # every record in the dashboard


def test_without_a_c_compiler_every_lane_means_the_usable_ones(env, tmp_path):
    """The sweep's worker starts on the CPU lanes' defaults before x86_c's probe has said it
    cannot build: with no C compiler, a sweep of every lane still measures only the usable
    ones, and naming x86_c is one line and a non-zero exit."""
    from arbiter import lane_table

    if any(r["available"] and r["platform"] != "cpu" for r in lane_table()):
        pytest.skip("a GPU lane is usable here: a sweep of every lane would tune it too")
    e = {k: v for k, v in env.items() if k != "ARBITER_EXTRA_LANES"}
    e["ARBITER_CC"] = str(tmp_path / "no-such-cc")
    e["CXX"] = str(tmp_path / "no-such-c++")  # (Inductor's, where torch is installed)
    spec = tmp_path / "two.toml"  # a matmul and a rowwise region: x86_c would take both
    spec.write_text('[[region]]\nname = "mm"\nM = 16\nN = 32\nK = 8\nepilogue = ["bias"]\n'
                    '[[region]]\nname = "rows"\nkind = "rowwise"\nM = 8\nN = 64\n'
                    'reduction = "softmax"\n')
    rows = json.loads(arbiter(e, "tune", spec, "--json").stdout)
    assert len(rows) == 2 and all(r["lane"] == "numpy" and r["status"] == "ok" for r in rows)
    db = sqlite3.connect(tmp_path / "arbiter.db")
    assert db.execute("select distinct name from lanes").fetchall() == [("numpy",)]
    p = arbiter(e, "tune", spec, "--lanes", "x86_c,numpy", check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1
    assert "lane 'x86_c' is not available here" in lines[0] and "no-such-cc" in lines[0]
