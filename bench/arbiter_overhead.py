"""The arbiter's own cost per trial, a re-run of a tuned spec, and samplers on a measured space.

    python3 bench/arbiter_overhead.py [--out FILE]      # FILE: bench/arbiter_overhead.json
    python3 bench/arbiter_overhead.py --only-overhead  # (1) only, printed (--out to keep it)
    python3 bench/arbiter_overhead.py --warm N   # (1), then N sweeps of (1)'s warm-cache case

1. Exhaustive sweep of one region (x86_c + numpy, every config) into a fresh SQLite file and
   a fresh build cache: wall time split into build (inside lane.build; plus, for a candidate
   the worker built ahead, the part of its compile done before its request came: the
   candidate the parent expected next, or a lane default built during the parent's start-up;
   a request's wait for such a build is its own build time), kernel
   timing (inside runner.time), verification runs (inside runner.run, on the oracle's inputs),
   oracle check (the rest of the worker's request: inputs, reference, comparisons), worker
   IPC, and search + records (Optuna ask/tell + our commits).
   "Own overhead" = search + records + IPC per trial: what the arbiter adds around a trial,
   reported two ways: steady state (the parent's time between one trial's result and the next
   trial's request, none for a request sent ahead, which the worker takes up as it replies,
   plus that trial's IPC and gate wait; trials 2..n) and all-in (total minus
   build, kernel timing, verification runs, oracle check and finalists, divided by n: one-time
   startup spread over the sweep). Both count the parent's time and the IPC even where they
   ran while the next candidate compiled ahead: upper bounds. The issue's formula as written
   (total minus build and kernel time, per trial) is reported too: it also counts the
   oracle's work, and it leaves out what ran while a compile did.
   One-time startup (imports, schema creation, fingerprint, study open, worker start) is
   reported on its own. The parent's CPU time per steady-state trial is given too: it moves
   less than wall time when other jobs share the cores.
   The same split for sampled sweeps (40 trials of the same region's 129 candidates: the
   default sampler's ask/tell path), once with a fresh build cache (every new candidate
   compiles, as in a first sweep) and once on (1)'s cache (build time is lookups, so the
   parent's work has the least to hide behind: the worst case for the overlap). These two
   run in the process of (1), as a notebook's later sweeps do, so they get the worker (1)
   left idle and their start-up has no worker start in it; (1)'s has. And for a
   first `tune` of the whole example spec (9 regions, 30 trials each, fresh build cache),
   where start-up is spread over all the regions' trials as in a user's sweep; it runs in a
   process of its own, and its all-in is also given from that process's start.
2. `arbiter tune` of a spec, then the same command again: wall of each, files added to the
   build cache by the second (compiles).
3. Samplers replayed on (1)'s recorded latencies (a lookup table; nothing re-timed) through
   the search's own `Asker`, asking one trial ahead as `tune` does and, for comparison, in
   step: measured trials (refused configs excluded, as in the trial budget) until one within
   3% of the best recorded latency is found, median and 90th percentile over 20 seeds
   (`--seeds`), and the time spent asking per candidate (perf_counter around the Asker's
   calls). `tpe-optuna` is the default's settings on Optuna's own TPESampler and study: the
   same sampler, but a proposal asked ahead is dropped by the rule of thumb (as on any Optuna
   study), at the cost of Optuna's asks and tells.

The machine's speed (`machine_probe_s`: 10M additions in a fresh interpreter) is read before
(1) and after the last part: the 2-core machine's numbers move with it by more than most
changes.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REGION = "row_gelu_residual"
SEEDS = 20
SAMPLED_TRIALS = 40
SPEC_TRIALS = 30


PROBE = ("import time\nt = time.perf_counter()\ns = 0\nfor i in range(10_000_000):\n    s += i\n"
         "print(time.perf_counter() - t)")


def machine_probe() -> float:
    """Seconds for 10M additions at a script's top level, in a fresh interpreter: the
    machine's speed at the time (the 2-core machine: 1.1 s at its fastest, 1.7-2.1 s in its
    slow states), so runs of different times can be told apart."""
    done = subprocess.run([sys.executable, "-c", PROBE], check=True, capture_output=True,
                          text=True)
    return float(done.stdout)


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def sweep(tmp: Path, trials_asked: int = 100_000, db: str = "exhaustive.db",
          whole_spec: bool = False, spawned_at: float | None = None) -> dict:
    """One sweep, split as the module's docstring says; `spawned_at` (wall clock) is when the
    process running it was spawned, for a sweep in a fresh process."""
    import arbiter
    from arbiter import _worker

    trials: list[dict] = []  # per check: start, end, parent cpu at both, child split
    acc = {"finals": 0.0, "finals_kernel": 0.0, "finals_samples": 0.0}
    finals: list[tuple[float, float]] = []  # when each region's finalists were re-timed
    check, interleave = _worker.Worker.check, _worker.Worker.interleave

    def counted_check(self, *a, **kw):
        cpu0 = _cpu()
        out = check(self, *a, **kw)
        end = time.perf_counter()
        # a request sent ahead was taken up when the reply before it was read: its wall
        # counts from then, and the trials' walls tile the sweep
        trials.append({"start": end - out.wall_s, "end": end, "cpu0": cpu0, "cpu1": _cpu(),
                       "build": out.build_s, "ahead": out.built_ahead_s,
                       "timing": out.timing_s, "gate": out.gate_s,
                       "verify": out.verify_s,
                       "work": out.work_s, "wall": out.wall_s})
        return out

    def counted_interleave(self, *a, **kw):
        t0 = time.perf_counter()
        try:
            out = interleave(self, *a, **kw)
        finally:
            finals.append((t0, time.perf_counter()))
            acc["finals"] += finals[-1][1] - t0
        # the finalists' time inside their runners' `time` (warm-ups and repeats) is kernel
        # time too, as a check's is (until the seventeenth round, only their samples were)
        acc["finals_kernel"] += out.timing_s
        acc["finals_samples"] += sum(sum(x) for x in out.samples if not isinstance(x, str))
        return out

    _worker.Worker.check, _worker.Worker.interleave = counted_check, counted_interleave
    url = f"sqlite:///{tmp / db}"
    spec = arbiter.load_spec(ROOT / "examples" / "regions.toml")
    target = spec if whole_spec else spec.get(REGION)
    load = os.getloadavg()[0]
    # resolved (with numpy) before the clock starts, as `import arbiter` did before the
    # package loaded its verbs on first use: the boundary every earlier round measured from
    tune = arbiter.tune
    t0, wall0 = time.perf_counter(), time.time()
    rows = tune(target, db=url, trials=trials_asked, lanes=["x86_c", "numpy"], seed=0)
    total = time.perf_counter() - t0
    _worker.Worker.check, _worker.Worker.interleave = check, interleave
    n = len(trials)

    def per_trial(key: str) -> float:
        return 1e3 * sum(t[key] for t in trials) / n

    work = sum(t["work"] for t in trials)
    ipc = [t["wall"] - t["work"] for t in trials]
    gate = [t["gate"] for t in trials]
    # steady state: between trial i's result and trial i+1's request, plus trial i+1's IPC and
    # the time its worker waited, before timing, for the parent's database writes to finish
    # (the part of those writes that build + check did not hide)
    # (a region's finalists, re-timed between its last trial and the next region's first,
    # are measurement, not part of that gap)
    gaps = [max(0.0, b["start"] - a["end"] - sum(f1 - f0 for f0, f1 in finals
                                                 if a["end"] <= f0 and f1 <= b["start"]))
            for a, b in zip(trials, trials[1:])]
    steady = [g + i + w for g, i, w in zip(gaps, ipc[1:], gate[1:])]
    cpu = [b["cpu0"] - a["cpu1"] + (b["cpu1"] - b["cpu0"]) for a, b in zip(trials, trials[1:])]
    startup = trials[0]["start"] - t0 + ipc[0]  # the first request also starts the worker
    search = total - sum(t["wall"] for t in trials) - acc["finals"]
    return {
        "region": "all of examples/regions.toml" if whole_spec else REGION,
        "trials": n, "total_s": total, "finals_s": acc["finals"],
        "load_avg_1min": [load, os.getloadavg()[0]],
        # compile time, wherever it ran: in the request, or ahead of it in the background
        "build_ms_per_trial": per_trial("build") + per_trial("ahead"),
        "built_ahead_ms_per_trial": per_trial("ahead"),
        "kernel_timing_ms_per_trial": per_trial("timing"),
        "verification_runs_ms_per_trial": per_trial("verify"),
        "oracle_check_ms_per_trial": 1e3 * (work - sum(
            t["build"] + t["timing"] + t["verify"] + t["gate"] for t in trials)) / n,
        "ipc_ms_per_trial": 1e3 * sum(ipc) / n,
        "gate_wait_ms_per_trial": 1e3 * sum(gate) / n,
        "search_and_records_ms_per_trial": 1e3 * search / n,
        # all-in, startup included
        "own_overhead_ms_per_trial": 1e3 * (search + sum(ipc) + sum(gate)) / n,
        # the formula as written: total minus build and kernel time (inside the
        # runners' `time`, warm-ups included, for checks and finalists alike; verification
        # runs), per trial; it keeps the oracle's comparisons and start-up
        "total_minus_build_and_kernel_ms_per_trial": 1e3 * (total - acc["finals_kernel"] - sum(
            t["build"] + t["ahead"] + t["timing"] + t["verify"] for t in trials)) / n,
        "finals_kernel_s": acc["finals_kernel"],
        "finals_samples_s": acc["finals_samples"],
        "startup_s": startup,
        # in a fresh process: what came before the tune call too (interpreter, `import arbiter`)
        **({"before_tune_s": wall0 - spawned_at,
            "all_in_from_process_start_ms_per_trial":
                1e3 * (wall0 - spawned_at + search + sum(ipc) + sum(gate)) / n}
           if spawned_at is not None else {}),
        # after the last trial: the last region's finalists (not counted here) and the rest
        "tail_s": total - (trials[-1]["end"] - t0) - sum(
            f1 - f0 for f0, f1 in finals if f0 >= trials[-1]["end"]),
        "steady_ms_per_trial": {"mean": 1e3 * statistics.mean(steady),
                                "median": 1e3 * statistics.median(steady),
                                "p90": 1e3 * sorted(steady)[int(0.9 * len(steady))],
                                "ipc_median": 1e3 * statistics.median(ipc[1:]),
                                "gate_wait_median": 1e3 * statistics.median(gate[1:]),
                                "parent_cpu_mean": 1e3 * statistics.mean(cpu)},
        "winners": [{k: row[k] for k in ("region", "lane", "config", "latency_ms", "status")}
                    for row in rows],
        "url": url,
    }


def rerun(tmp: Path, trials: int) -> dict:
    env = dict(os.environ, ARBITER_CACHE_DIR=str(tmp / "cache2"),
               ARBITER_DB=f"sqlite:///{tmp / 'rerun.db'}")
    cmd = [sys.executable, "-m", "arbiter", "tune", str(ROOT / "examples" / "regions.toml"),
           "--lanes", "x86_c,numpy", "--trials", str(trials), "--seed", "0", "--json"]

    def files() -> int:
        return sum(len(f) for _, _, f in os.walk(tmp / "cache2"))

    walls = []
    compiles = []
    for _ in range(2):
        before = files()
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        walls.append(time.perf_counter() - t0)
        compiles.append(files() - before)
    return {"command": " ".join(["arbiter", *cmd[3:]]), "first_s": walls[0],
            "second_s": walls[1], "speedup": walls[0] / walls[1],
            "first_compiles": compiles[0], "second_compiles": compiles[1]}


def replay(url: str, seeds: int = SEEDS) -> dict:
    import optuna

    from arbiter import load_spec
    from arbiter._records import Records
    from arbiter._registry import get_lane
    from arbiter._samplers import DEFAULT_TPE, SAMPLERS, make_study, optuna_tpe
    from arbiter._store import RegionModel, session_scope

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.simplefilter("ignore")
    region = load_spec(ROOT / "examples" / "regions.toml").get(REGION)
    records = Records(url)
    with session_scope(url) as s:
        rid = RegionModel.find(s, region.key).id
    table = {(r.lane, r.config.key): r for r in records.results(rid, 1)}
    budget = 1e-3
    best = min(r.median for r in table.values() if r.fits(budget))
    good = {k for k, r in table.items() if r.fits(budget) and r.median <= 1.03 * best}
    lanes = {n: get_lane(n) for n in ("numpy", "x86_c")}
    out: dict = {"space": len(table), "within_3pct": len(good), "samplers": {},
                 "samplers_in_step": {}}
    makers = {name: partial(make_study, name) for name in SAMPLERS}

    def stock_tpe(seed: int):
        return optuna.create_study(sampler=optuna_tpe(seed, **DEFAULT_TPE), direction="minimize")

    # the default's settings on Optuna's own TPESampler and study (tests/test_samplers.py)
    makers["tpe-optuna"] = stock_tpe
    for name, make in makers.items():
        for ahead, key in ((True, "samplers"), (False, "samplers_in_step")):
            try:
                runs = [_trials_to_good(make(seed), seed, ahead, lanes, region, table, good,
                                        budget) for seed in range(seeds)]
            except Exception as e:
                out[key][name] = f"unavailable: {e}"
                continue
            needed = [n for n, _, _ in runs]
            out[key][name] = {"median": statistics.median(needed),
                              "p90": statistics.quantiles(needed, n=10,
                                                          method="inclusive")[-1],
                              "runs": needed,
                              "asking_ms_per_candidate": 1e3 * sum(s for _, s, _ in runs)
                              / sum(k for _, _, k in runs)}
    return out


def _trials_to_good(study, seed: int, ahead: bool, lanes: dict, region, table: dict,
                    good: set, budget: float) -> tuple[int, float, int]:
    """Measured trials (refused configs excluded, as in the trial budget) until a config
    within 3% of the best: the search's own Asker, asking one trial ahead as `tune` does
    (`ahead`) or in step (ask, measure, tell, ask: the loop before this round). Also the
    seconds spent asking (`ask_ahead`, `next`: repeats of measured candidates included) and
    the candidates it went through (refused ones included)."""
    from arbiter._asker import Asker, pool
    from arbiter._plan import Plan
    from arbiter._records import Result
    from arbiter._values import Status

    p = Plan(lanes, {n: ln.space(region) for n, ln in lanes.items()}, len(table), len(table))
    rng = random.Random(seed)
    asker = Asker(study, p, pool(p, rng), rng, budget)
    asking = 0.0

    def timed(call, *a):
        nonlocal asking
        t0 = time.perf_counter()
        got = call(*a)
        asking += time.perf_counter() - t0
        return got

    nxt = timed(asker.next)
    while nxt is not None:
        trial, lane, cfg = nxt
        k = (lane, cfg.key)
        if ahead:  # asked while this one is "in the worker"
            timed(asker.ask_ahead, k)
        # not listed: a rule breaker, recorded as invalid in a real sweep
        p.measured[k] = table.get(k) or Result(-1, lane, cfg, Status.INVALID, None, None,
                                               None, None, budget)
        asker.told(trial, p.measured[k])
        if k in good:
            return (len(p.measured) - sum(1 for r in p.measured.values()
                                          if r.status is Status.INVALID), asking,
                    len(p.measured))
        nxt = timed(asker.next)
    return len(table), asking, len(p.measured)


def _byte_compiled() -> None:
    """Bytecode for the arbiter's own modules, as an installed package has it (pip compiles on
    install): with PYTHONDONTWRITEBYTECODE set, every start would compile them again; done
    once per bench run, not in the whole-spec sweep's process, whose start is timed."""
    for package in ("arbiter", "lanes"):
        compileall.compile_dir(ROOT / package, quiet=1)


def warm_only(n: int) -> None:
    """The exhaustive sweep (it fills a fresh build cache), then `n` sweeps of the warm-cache
    case into fresh databases, in this process; each one's line (the exhaustive one's only
    when `n` is 0)."""
    _byte_compiled()
    with tempfile.TemporaryDirectory(prefix="arbiter-bench-") as t:
        tmp = Path(t)
        os.environ["ARBITER_CACHE_DIR"] = str(tmp / "cache1")
        print(json.dumps({"machine_probe_s": machine_probe()}), flush=True)
        first = sweep(tmp)
        if n == 0:
            _line(first)
        for i in range(n):
            _line(sweep(tmp, SAMPLED_TRIALS, f"warm-{i}.db"))


def _line(r: dict) -> None:
    steady = r["steady_ms_per_trial"]
    print(json.dumps({
        "trials": r["trials"],
        **{k: round(r[k], 3) for k in (
            "total_minus_build_and_kernel_ms_per_trial", "gate_wait_ms_per_trial",
            "oracle_check_ms_per_trial", "verification_runs_ms_per_trial",
            "kernel_timing_ms_per_trial", "startup_s", "tail_s")},
        **{f"steady_{k}": round(steady[k], 3) for k in (
            "mean", "median", "parent_cpu_mean")}}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="where the results go (default: bench/arbiter_overhead.json "
                                  "for a full run; with --only-overhead, nowhere but stdout)")
    ap.add_argument("--rerun-trials", type=int, default=6)
    ap.add_argument("--seeds", type=int, default=SEEDS, help="sampler replay seeds")
    ap.add_argument("--only-overhead", action="store_true",
                    help="the exhaustive sweep only (no sampler replay, no re-run)")
    ap.add_argument("--warm", type=int, metavar="N",
                    help="the exhaustive sweep, then N warm-cache sweeps; prints each one's "
                         "literal ms per trial (for A/B runs of that case; N=0: the "
                         "exhaustive sweep's)")
    ap.add_argument("--spec-sweep", nargs=2, metavar=("TMP", "SPAWNED_AT"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.warm is not None:
        warm_only(args.warm)
        return
    if args.spec_sweep:
        tmp, spawned_at = args.spec_sweep
        print(json.dumps(sweep(Path(tmp), SPEC_TRIALS, "spec.db", whole_spec=True,
                               spawned_at=float(spawned_at))))
        return
    _byte_compiled()
    with tempfile.TemporaryDirectory(prefix="arbiter-bench-") as t:
        tmp = Path(t)
        os.environ["ARBITER_CACHE_DIR"] = str(tmp / "cache1")
        result = {"machine_probe_s": [machine_probe()], "exhaustive": sweep(tmp)}
        print(json.dumps(result["exhaustive"], indent=1), flush=True)
        # the default sampler's path (space larger than the trial budget: ask/tell), fresh
        # database; first with a fresh build cache, then on the exhaustive sweep's
        os.environ["ARBITER_CACHE_DIR"] = str(tmp / "cache-sampled")
        result["sampled"] = sweep(tmp, SAMPLED_TRIALS, "sampled.db")
        print(json.dumps(result["sampled"], indent=1), flush=True)
        os.environ["ARBITER_CACHE_DIR"] = str(tmp / "cache1")
        result["sampled_cached"] = sweep(tmp, SAMPLED_TRIALS, "sampled-cached.db")
        print(json.dumps(result["sampled_cached"], indent=1), flush=True)
        # a first `arbiter tune` of the whole example spec (9 regions, 30 trials each, fresh
        # build cache): start-up spread over all of its trials, as a user's sweep spreads it
        # in a process of its own, so its start-up has every import in it
        done = subprocess.run(
            [sys.executable, __file__, "--spec-sweep", str(tmp), str(time.time())], check=True,
            text=True,
            stdout=subprocess.PIPE, env=dict(os.environ, ARBITER_CACHE_DIR=str(tmp / "cache-spec")))
        result["spec"] = json.loads(done.stdout)
        print(json.dumps(result["spec"], indent=1), flush=True)
        if not args.only_overhead:
            result["replay"] = replay(result["exhaustive"]["url"], args.seeds)
            print(json.dumps({k: v if not k.startswith("samplers") else {
                s: (x if isinstance(x, str) else {
                    "median": x["median"], "p90": x["p90"],
                    "asking_ms_per_candidate": round(x["asking_ms_per_candidate"], 3)})
                for s, x in v.items()} for k, v in result["replay"].items()}, indent=1),
                flush=True)
            result["rerun"] = rerun(tmp, args.rerun_trials)
            print(json.dumps(result["rerun"], indent=1), flush=True)
        result["machine_probe_s"].append(machine_probe())
        print(json.dumps({"machine_probe_s": result["machine_probe_s"]}), flush=True)
    out = args.out or (None if args.only_overhead else ROOT / "bench" / "arbiter_overhead.json")
    if out is not None:
        Path(out).write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
