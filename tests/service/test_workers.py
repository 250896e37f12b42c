"""Many workers on one database: leases, jobs, and workers killed mid-sweep, on a real
PostgreSQL server (and on SQLite, for workers of one machine)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import func, select

from arbiter import FusedRegion, Status
from arbiter.lane import Config, get_lane
from arbiter.measure import Measurement
from arbiter.records import (
    CandidateModel,
    Lease,
    LeaseLost,
    LeaseModel,
    MeasurementModel,
    Queue,
    Records,
    WinnerModel,
    fingerprint,
    session_scope,
)
from tests import fake_lanes

REGIONS = [FusedRegion(8, 16, 8 * (i + 1), name=f"r{i}", epilogue=("bias", "relu"))
           for i in range(4)]


@pytest.fixture(params=["sqlite", "postgres"])
def url(request, tmp_path, monkeypatch):
    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes("fake_tiny", "fake_slow"))
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'arbiter.db'}"
    return request.getfixturevalue("pg_url")


def _ids(url):
    records = Records(url)
    lane = get_lane("fake_tiny")
    return records, *records.ids(REGIONS[0], fingerprint(), [lane])


def test_a_lease_is_held_by_one_process_until_it_goes_silent(url):
    records, region_id, env_id, _ = _ids(url)
    a = Lease(url, region_id, env_id, "host:1:a", seconds=1.0)
    b = Lease(url, region_id, env_id, "host:2:b", seconds=1.0)
    assert a.take() is None
    assert a.take() is None  # its own holder takes it again
    assert b.take() == "host:1:a"
    time.sleep(2.2)  # (SQLite's clock counts whole seconds)
    assert b.take() is None and b.takeovers == 1
    assert not a.renew() and a.lost.is_set()
    time.sleep(2.2)
    assert a.take() is None and a.takeovers == 2  # takeovers add up until one lets it go
    a.release()
    assert b.take() is None and b.takeovers == 0


def test_a_write_by_a_process_that_lost_its_lease_is_rolled_back(url):
    records, region_id, env_id, lane_ids = _ids(url)
    a = Lease(url, region_id, env_id, "host:1:a", seconds=1.0)
    assert a.take() is None
    held = records.guarded(a.hold)
    m = Measurement(Status.OK, rel_error=1e-7, samples=(1e-3,) * 10)
    held.record(region_id, env_id, lane_ids["fake_tiny"], Config.of({"block": 1}), m, 1e-4)
    time.sleep(2.2)
    assert Lease(url, region_id, env_id, "host:2:b", seconds=1.0).take() is None
    with pytest.raises(LeaseLost):
        held.record(region_id, env_id, lane_ids["fake_tiny"], Config.of({"block": 2}), m, 1e-4)
    with session_scope(url) as s:
        assert s.scalar(select(func.count()).select_from(MeasurementModel)) == 1


def _workers(url, n, job, lease=2.0):
    cmd = [sys.executable, "-m", "arbiter", "worker", "--db", url, "--job", str(job),
           "--until-done", "--lanes", "fake_slow", "--lease", str(lease), "--poll", "0.2"]
    return [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             start_new_session=True) for _ in range(n)]


def _holding(url, pid):
    with session_scope(url) as s:
        holders = s.scalars(select(LeaseModel.holder).where(LeaseModel.holder.is_not(None)))
        return any(h.split(":")[1] == str(pid) for h in holders)


@pytest.mark.slow
def test_workers_share_a_job_and_one_killed_mid_sweep_loses_nothing(url):
    """Three workers, one killed -9 while it holds a region: every region is answered, no
    candidate is measured twice and none is lost."""
    queue = Queue(url)
    job = queue.submit(REGIONS, {"trials": 3, "timeout": 30, "lanes": ["fake_slow"]}, "test")
    procs = _workers(url, 3, job)
    victim = procs[0]
    deadline = time.monotonic() + 60
    while not _holding(url, victim.pid):
        assert time.monotonic() < deadline, "the first worker never took a region"
        time.sleep(0.05)
    time.sleep(random.uniform(0.2, 1.5))
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    for p in procs[1:]:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err.decode()[-2000:]
    st = queue.status(job)
    assert st["state"] == "done", json.dumps(st)[:2000]
    assert [r["name"] for r in st["regions"]] == [r.name for r in REGIONS]
    assert all(f["state"] == "done" and f["row"]["lane"] == "fake_slow"
               for r in st["regions"] for f in r["finished"])
    with session_scope(url) as s:
        per_candidate = s.execute(
            select(MeasurementModel.candidate_id, func.count())
            .where(MeasurementModel.kind == "sweep")
            .group_by(MeasurementModel.candidate_id)).all()
        per_region = s.execute(
            select(CandidateModel.region_id, func.count())
            .join(MeasurementModel, MeasurementModel.candidate_id == CandidateModel.id)
            .where(MeasurementModel.kind == "sweep", MeasurementModel.status != "invalid")
            .group_by(CandidateModel.region_id)).all()
        winners = s.scalar(select(func.count()).select_from(WinnerModel))
    assert per_candidate and all(n == 1 for _, n in per_candidate)  # none measured twice
    # none lost: every region has its trials (rule breakers the sampler drew do not count)
    assert sorted(n for _, n in per_region) == [3] * len(REGIONS)
    assert winners == len(REGIONS)


def test_tune_with_workers_answers_like_tune(url, capsys, tmp_path):
    """Every region of the spec gets its row, the same content under two names too."""
    from arbiter.cli import main

    spec = tmp_path / "spec.toml"
    with open(spec, "w") as f:
        for r in [*REGIONS[:2], REGIONS[1].with_name("twin")]:
            f.write(f"[[region]]\nname = '{r.name}'\nM = {r.M}\nN = {r.N}\nK = {r.K}\n"
                    "epilogue = ['bias', 'relu']\n")
    code = main(["tune", str(spec), "--db", url, "--workers", "2", "--lanes", "fake_tiny",
                 "--trials", "4", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [r["region"] for r in rows] == ["r0", "r1", "twin"]
    assert all(r["lane"] == "fake_tiny" and r["new_trials"] >= 4 for r in rows)


def test_tune_with_workers_sweeps_only_the_space_asked_for(url, capsys, tmp_path):
    """--config, --exclude and --where travel with the job: each worker narrows its
    region's space as `tune` does; a value no lane offers is one line before any job."""
    from arbiter.cli import main

    spec = tmp_path / "spec.toml"
    spec.write_text("".join(f"[[region]]\nname = '{r.name}'\nM = {r.M}\nN = {r.N}\n"
                            f"K = {r.K}\nepilogue = ['bias', 'relu']\n" for r in REGIONS[:2]))
    argv = ["tune", str(spec), "--db", url, "--workers", "2", "--lanes", "fake_tiny"]
    assert main([*argv, "--exclude", "block=3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--exclude block=3: no lane swept offers" in err
    assert Queue(url).jobs() == []
    code = main([*argv, "--trials", "3", "--config", "block=2", "--exclude", "unroll=4",
                 "--where", "unroll > 1 or fast", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 0 and [r["region"] for r in rows] == ["r0", "r1"]
    assert all(r["config"] == {"block": 2, "fast": False, "unroll": 2} for r in rows)
    with session_scope(url) as s:
        configs = [json.loads(c) for c in s.scalars(select(CandidateModel.config))]
    assert configs and all(c["block"] == 2 and c["unroll"] != 4 and (c["unroll"] > 1 or
                                                                       c["fast"])
                           for c in configs)


def test_worker_mistakes_are_one_line(url, capsys):
    from arbiter.cli import main

    for argv, says in ((["--cpus", "x"], "--cpus: expected"),
                       (["--device", "0;rm"], "--device: expected"),
                       (["--lease", "0"], "--lease must be positive")):
        assert main(["worker", "--db", url, *argv]) == 2
        err = capsys.readouterr().err
        assert says in err and "Traceback" not in err and err.count("\n") == 1


def test_jobs_lists_shows_and_cancels(url, capsys):
    from arbiter.cli import main

    queue = Queue(url)
    job = queue.submit(REGIONS[:2], {"trials": 2}, "test")
    assert main(["jobs", "--db", url, "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert listed["id"] == job and listed["state"] == "queued"
    assert listed["progress"] == {"regions": 2, "done": 0, "failed": 0, "running": 0}
    assert main(["jobs", str(job), "--db", url]) == 0
    out = capsys.readouterr().out
    assert "queued, 0/2 regions done" in out and "r1" in out and "waiting" in out
    records = Records(url)
    env = records.environment(fingerprint())
    assert len(queue.pending(env)) == 2
    assert main(["jobs", str(job), "--cancel", "--db", url]) == 0
    assert "cancelled" in capsys.readouterr().out
    assert queue.pending(env) == []  # workers take nothing more of it
    assert main(["jobs", "99", "--db", url]) == 2
    assert capsys.readouterr().err.strip() == "arbiter: error: no job 99"


def test_export_to_optuna_works_on_postgres(pg_url, monkeypatch, tmp_path, capsys):
    """The reported failure: Optuna's tables on PostgreSQL (its enum types) made by hand."""
    import optuna

    from arbiter.cli import main

    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes("fake_tiny"))
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    import arbiter

    arbiter.tune(REGIONS[:1], db=pg_url, lanes="fake_tiny", trials=4)
    assert main(["export", "optuna", "--db", pg_url]) == 0
    capsys.readouterr()
    [summary] = optuna.get_all_study_summaries(pg_url)
    assert summary.n_trials >= 4 and summary.best_trial is not None


def _own_postgres(tmp_path, monkeypatch) -> tuple[list[str], str, str]:
    """(the server script's command, a data folder, a free port) for a PostgreSQL server this
    test starts and stops itself; workers it starts offer the fake_tiny lane."""
    import tempfile

    from tests.conftest import SCRIPT, free_port, need_postgres

    need_postgres()
    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes("fake_tiny"))
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    return ["bash", str(SCRIPT)], tempfile.mkdtemp(prefix="arbiter-pg-"), str(free_port())


def _worker(url: str) -> subprocess.Popen:
    """`arbiter worker` in a session of its own, its stderr piped."""
    return subprocess.Popen([sys.executable, "-m", "arbiter", "worker", "--db", url, "--poll",
                             "0.2"], stderr=subprocess.PIPE, text=True, start_new_session=True)


def _one_job_done_by(worker: subprocess.Popen, url: str, why: str) -> None:
    """Submit a one-region job and wait (at most 60 s) for `worker`, still running, to do it."""
    job = Queue(url).submit(REGIONS[:1], {"trials": 2, "lanes": ["fake_tiny"]}, "test")
    deadline = time.monotonic() + 60
    while Queue(url).status(job)["state"] != "done":
        assert worker.poll() is None, worker.stderr.read()
        assert time.monotonic() < deadline, why
        time.sleep(0.3)


@pytest.mark.slow
def test_a_worker_waits_for_the_database_to_come_back(tmp_path, monkeypatch):
    pg, folder, port = _own_postgres(tmp_path, monkeypatch)
    url = subprocess.run([*pg, "start", folder, port], capture_output=True, text=True,
                         check=True).stdout.strip()
    worker = None
    try:
        Queue(url)
        worker = _worker(url)
        # the database goes away once the worker is in its loop (its banner is printed after
        # it first reached the database), however long its start took on a busy machine
        banner = worker.stderr.readline()
        assert "worker" in banner and "lanes" in banner, banner + worker.stderr.read()
        time.sleep(0.5)
        subprocess.run([*pg, "stop", folder], check=True, capture_output=True)
        time.sleep(3)
        subprocess.run([*pg, "start", folder, port], check=True, capture_output=True)
        _one_job_done_by(worker, url, "the worker did not come back")
    finally:
        if worker is not None:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGTERM)
            err = worker.communicate(timeout=30)[1]
            assert "the database:" in err and "trying again" in err
            assert "Traceback" not in err
        subprocess.run([*pg, "stop", folder], capture_output=True)


@pytest.mark.slow
def test_a_worker_started_before_its_database_waits_for_it(tmp_path, monkeypatch):
    """A fleet may come up before its PostgreSQL server: the worker says why it waits, then
    works once the server is up. A SQLite file it cannot open is still one line and exit 2."""
    pg, folder, port = _own_postgres(tmp_path, monkeypatch)
    url = f"postgresql+psycopg://arbiter@127.0.0.1:{port}/arbiter"
    worker = _worker(url)
    try:
        waiting = worker.stderr.readline()
        assert "the database:" in waiting and "trying again" in waiting, waiting
        started = subprocess.run([*pg, "start", folder, port], capture_output=True, text=True,
                                 check=True).stdout.strip()
        assert started == url, (started, url)
        _one_job_done_by(worker, url, "the worker never started working")
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
        err = worker.communicate(timeout=30)[1]
        assert "Traceback" not in err, err
        subprocess.run([*pg, "stop", folder], capture_output=True)
    bad = subprocess.run([sys.executable, "-m", "arbiter", "worker", "--db",
                          f"sqlite:///{tmp_path}/no/such/dir/x.db"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr


def test_a_region_whose_sweep_fails_is_failed_once_and_the_job_ends(url):
    """A lane bug outside the isolated process, and a job asking for no lane this worker
    has: the region fails (once, with why), the worker goes on, the job is done."""
    from arbiter.service.workers import work

    os.environ["ARBITER_EXTRA_LANES"] += "," + fake_lanes.extra_lanes("fake_broken_space")
    queue = Queue(url)
    job = queue.submit(REGIONS[:2], {"trials": 2, "lanes": ["fake_broken_space"]}, "test")
    assert work(url, job_id=job, until_done=True, poll=0.1, lanes=["fake_broken_space"]) == 0
    st = queue.status(job)
    assert st["state"] == "done" and st["progress"]["failed"] == 2
    for r in st["regions"]:
        [f] = r["finished"]
        assert f["state"] == "failed" and "RuntimeError: space exploded" in f["error"]


def test_a_silent_lease_is_not_running_and_done_stays_done(url):
    queue = Queue(url)
    job = queue.submit(REGIONS[:1], {"trials": 2}, "test")
    records, region_id, env_id, _ = _ids(url)
    dead = Lease(url, region_id, env_id, "gone:1:x", seconds=1.0, job_id=job)
    assert dead.take() is None
    assert queue.status(job)["progress"]["running"] == 1
    time.sleep(2.2)
    assert queue.status(job)["progress"]["running"] == 0  # its holder went silent
    [p] = queue.pending(env_id, job)
    queue.finish(p, env_id, state="done", worker="w:2:y", lanes=["fake_tiny"], row={})
    other = Lease(url, region_id, env_id, "other:3:z", seconds=30.0, job_id=job)
    assert other.take() is None  # (another sweep of it, say another budget's)
    st = queue.status(job)
    assert st["state"] == "done" and st["progress"]["running"] == 1
