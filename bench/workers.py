"""Many workers on one database.

    python3 bench/workers.py kill  [--runs 20] [--workers 4] [--trials 4] [--out F]
    python3 bench/workers.py speed [--trials 10] [--out F]

`kill`: on a real PostgreSQL server (scripts/postgres.sh, in a temporary folder), each run
submits the example spec's regions as one job to a fresh database and starts `--workers`
`arbiter worker` processes on it; in every run but the first, one worker, chosen at random, is
killed -9 at a random moment (uniform in 0.5-10 s). It counts candidates measured twice
(more than one sweep measurement of one candidate), regions lost (no finished task, no
declared winner, or fewer valid trials than asked) and the wall time. Workers here are not
pinned: this run counts claims, not timings. Leases go silent after 5 s (default 60).

`speed`: the example spec's CPU regions (numpy, x86_c) swept by `arbiter tune` with one
worker and with two (`--workers`, one CPU each), on a warm build cache; then every declared
winner is re-timed against its runner-up on the quiet machine (bench/noisy_neighbour.py's
re-timing), so a faster sweep that declared worse winners shows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "regions.toml"
LEASE = 5.0


def _postgres(folder: str) -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "start", folder,
                          str(port)], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _fresh(server: str, name: str) -> str:
    import psycopg

    with psycopg.connect(server.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return server.rsplit("/", 1)[0] + "/" + name


def _count(url: str, trials: int) -> dict:
    from sqlalchemy import func, select

    from arbiter.records import (
        CandidateModel,
        MeasurementModel,
        Queue,
        TaskModel,
        WinnerModel,
        session_scope,
    )

    with session_scope(url) as s:
        twice = s.scalar(select(func.count()).select_from(
            select(MeasurementModel.candidate_id).where(MeasurementModel.kind == "sweep")
            .group_by(MeasurementModel.candidate_id).having(func.count() > 1).subquery()))
        valid = dict(s.execute(
            select(CandidateModel.region_id, func.count())
            .join(MeasurementModel, MeasurementModel.candidate_id == CandidateModel.id)
            .where(MeasurementModel.kind == "sweep", MeasurementModel.status != "invalid")
            .group_by(CandidateModel.region_id)).all())
        won = set(s.scalars(select(WinnerModel.region_id)))
        done = set(s.scalars(select(TaskModel.region_id).where(TaskModel.state == "done")))
    st = Queue(url).status(Queue(url).jobs()[-1])
    from arbiter.records import RegionModel

    with session_scope(url) as s:
        ids = {k: i for k, i in s.execute(select(RegionModel.key, RegionModel.id))}
    lost = [r["name"] for r in st["regions"]
            if ids[r["key"]] not in done or ids[r["key"]] not in won
            or valid.get(ids[r["key"]], 0) < trials]
    return {"measured_twice": twice, "lost": lost, "state": st["state"],
            "candidates": sum(valid.values())}


def _holds(url: str, pid: int) -> bool:
    from sqlalchemy import select

    from arbiter.records import LeaseModel, session_scope

    with session_scope(url) as s:
        return any(h.split(":")[1] == str(pid) for h in s.scalars(
            select(LeaseModel.holder).where(LeaseModel.holder.is_not(None))))


def kill_runs(args: argparse.Namespace) -> dict:
    from arbiter.records import Queue
    from arbiter.region import load_spec

    folder = tempfile.mkdtemp(prefix="arbiter-bench-pg-")
    server = _postgres(folder)
    runs = []
    try:
        for i in range(args.runs):
            url = _fresh(server, f"run{i}_{os.getpid()}")
            job = Queue(url).submit(list(load_spec(SPEC)), {
                "trials": args.trials, "lanes": ["numpy", "x86_c"], "timeout": 60}, "bench")
            t0 = time.perf_counter()
            procs = [subprocess.Popen(
                [sys.executable, "-m", "arbiter", "worker", "--db", url, "--job", str(job),
                 "--until-done", "--lease", f"{LEASE:g}", "--poll", "0.5"],
                stderr=subprocess.DEVNULL, start_new_session=True)
                for _ in range(args.workers)]
            killed = None
            if i > 0:
                at = random.uniform(0.5, 10.0)
                victim = random.randrange(args.workers)
                time.sleep(at)
                if procs[victim].poll() is None:
                    holding = _holds(url, procs[victim].pid)
                    os.killpg(procs[victim].pid, 9)
                    killed = {"worker": victim, "at_s": round(at, 2), "held_a_region": holding}
            for p in procs:
                p.wait()
            wall = time.perf_counter() - t0
            run = {"run": i, "killed": killed, "wall_s": round(wall, 1), **_count(url, args.trials)}
            runs.append(run)
            print(json.dumps(run), flush=True)
    finally:
        subprocess.run(["bash", str(ROOT / "scripts" / "postgres.sh"), "stop", folder],
                       capture_output=True)
    return {"workers": args.workers, "trials": args.trials, "lease_s": LEASE, "runs": runs,
            "measured_twice": sum(r["measured_twice"] for r in runs),
            "lost": sum(len(r["lost"]) for r in runs),
            "not_done": sum(r["state"] != "done" for r in runs),
            "killed_holding_a_region": sum(bool(r["killed"] and r["killed"]["held_a_region"])
                                           for r in runs)}


def speed(args: argparse.Namespace) -> dict:
    sys.path.insert(0, str(ROOT / "bench"))
    from noisy_neighbour import quiet_ratio

    import arbiter

    spec = arbiter.load_spec(SPEC)
    out = {}
    with tempfile.TemporaryDirectory(prefix="arbiter-bench-") as tmp:
        # the build cache warmed for both settings' CPU sets (thread counts differ)
        for n in (1, 2):
            cmd = [sys.executable, "-m", "arbiter", "tune", str(SPEC), "--db",
                   f"sqlite:///{tmp}/warm{n}.db", "--trials", str(args.trials), "--lanes",
                   "numpy,x86_c", "--json", "--workers", str(n)]
            subprocess.run(cmd, capture_output=True, check=True)
        for n in (1, 2):
            db = f"sqlite:///{tmp}/w{n}.db"
            cmd = [sys.executable, "-m", "arbiter", "tune", str(SPEC), "--db", db, "--trials",
                   str(args.trials), "--lanes", "numpy,x86_c", "--json", "--workers", str(n)]
            t0 = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            wall = time.perf_counter() - t0
            rows = json.loads(done.stdout)
            ratios = []
            for row in rows:
                if row["runner_up"] is not None:
                    ratio, _ = quiet_ratio(spec.get(row["region"]), row, row["runner_up"])
                    ratios.append(round(ratio, 3))
            out[f"{n}_workers"] = {"wall_s": round(wall, 1), "quiet_ratios": ratios,
                                   "worst_quiet_ratio": max(ratios) if ratios else None}
            print(json.dumps({n: out[f"{n}_workers"]}), flush=True)
    out["speedup"] = round(out["1_workers"]["wall_s"] / out["2_workers"]["wall_s"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("kill", "speed"))
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    os.environ.setdefault("ARBITER_CACHE_DIR", tempfile.mkdtemp(prefix="arbiter-cache-"))
    result = kill_runs(args) if args.what == "kill" else speed(args)
    summary = {k: v for k, v in result.items() if k != "runs"}
    print(json.dumps(summary))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
