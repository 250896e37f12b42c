"""Arbiter's samplers against Kernel Tuner's strategies on the same recorded spaces, nothing
measured: for each region of a database, one lane's recorded configs are written as a Kernel
Tuner cache file and replayed in its simulation mode; the same configs are replayed through
`tune`'s search (`arbiter.search.replay`). Both count the configs evaluated until one within
the budget is within `--within` of the best recorded latency.

    pip install kernel_tuner==1.5.0
    python3 bench/kernel_tuner_replay.py --db sqlite:///arbiter.db --lane x86_c --seeds 10

Each (region, strategy, seed) runs in a child process. A strategy stops once it has evaluated
every recorded config (Kernel Tuner's `max_fevals`) or after `--limit` seconds (its
`time_limit`: some strategies never evaluate every config of a recorded space, which has holes,
and would run on forever); the child is killed if it has not answered a little after that. A
replay stopped by the limit before the goal, killed, or raising counts as never getting there
and is reported as such (with the error's line); the run goes on.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from arbiter.cli._swept import swept
from arbiter.lane import Status
from arbiter.search import recorded_space, replay

STRATEGIES = ("random_sample", "genetic_algorithm", "simulated_annealing", "greedy_ils",
              "diff_evo", "pso", "firefly_algorithm", "dual_annealing", "bayes_opt")
GRACE_S = 30.0  # past `--limit`: Kernel Tuner's own start-up, then the child is killed


@dataclass(frozen=True)
class Outcome:
    """One replay: trials until the goal (None: never), or why there is no count."""

    trials: int | None = None
    failed: str | None = None  # "timeout: ..." or "error: ..."
    stalled: bool = False  # stopped by the time limit, not by having seen every config


def _cache(path: Path, name: str, results: list, params: dict[str, list], budget: float) -> None:
    entries = {}
    for r in results:
        values = r.config.as_dict()
        ok = r.fits(budget) and r.latency is not None
        entries[",".join(str(values[k]) for k in params)] = {
            **values, "time": r.latency * 1e3 if ok else "RuntimeFailedConfig", "times": [],
            "compile_time": 0.0, "verification_time": 0.0, "benchmark_time": 0.0,
            "strategy_time": 0.0, "framework_time": 0.0, "timestamp": "2026-12-03 00:00:00"}
    path.write_text(json.dumps({
        "device_name": "recorded", "kernel_name": name, "problem_size": [1],
        "tune_params_keys": list(params), "tune_params": params, "objective": "time",
        "cache": entries}))


def _only(keys: set[str], names: list[str]):
    """Kernel Tuner's restriction: the recorded configs. A plain function gets the config as a
    dict; a lambda would be rewritten from its source text."""
    def recorded(p: dict) -> bool:
        return ",".join(str(p[k]) for k in names) in keys

    return recorded


def _kernel_tuner(results: list, budget: float, goal: float, strategy: str, seed: int,
                  limit: float) -> Outcome:
    from kernel_tuner import tune_kernel

    [(lane, space)] = recorded_space(results).items()
    params = {t.name: list(t.choices) for t in space.tunables}
    keys = {",".join(str(r.config.as_dict()[k]) for k in params) for r in results}
    with tempfile.TemporaryDirectory() as d:
        cache = Path(d) / "cache.json"
        _cache(cache, lane, results, params, budget)
        random.seed(seed)
        np.random.seed(seed)
        start = time.monotonic()
        evaluated, _ = tune_kernel(
            lane, "/* replayed from the records */", 1, [], params, lang="C",
            simulation_mode=True, cache=str(cache), strategy=strategy,
            strategy_options={"max_fevals": len(keys), "time_limit": limit},
            restrictions=[_only(keys, list(params))],
            verbose=False, quiet=True)
        spent = time.monotonic() - start
    seen: set[str] = set()
    found = None
    for r in evaluated:
        key = ",".join(str(r[k]) for k in params)
        if key in seen:
            continue
        seen.add(key)
        t = r.get("time")
        if found is None and "__error__" not in r and isinstance(t, float) and t * 1e-3 <= goal:
            found = len(seen)
    stalled = len(seen) < len(keys) and spent >= limit
    if found is None and stalled:
        return Outcome(failed=f"timeout: {len(seen)} of {len(keys)} configs in {limit:.0f} s",
                       stalled=True)
    return Outcome(found, stalled=stalled)


def _answer(send, *args) -> None:
    try:
        out = _kernel_tuner(*args)
    except Exception as e:  # noqa: BLE001  a strategy that raises is a result
        line = (str(e).strip().splitlines() or [""])[0][:160]
        out = Outcome(failed=f"error: {type(e).__name__}: {line}")
    send.send(out)


def _isolated(results: list, budget: float, goal: float, strategy: str, seed: int,
              limit: float) -> Outcome:
    """One replay in a forked child (it shares the parent's imports), killed past the limit."""
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_answer, args=(send, results, budget, goal, strategy, seed, limit))
    child.start()
    send.close()
    try:
        if recv.poll(limit + GRACE_S):
            return recv.recv()
        return Outcome(failed=f"timeout: killed after {limit + GRACE_S:.0f} s")
    except EOFError:
        return Outcome(failed=f"error: the child ended with status {child.exitcode}")
    finally:
        child.kill()
        child.join()
        recv.close()


def _summary(name: str, outcomes: list[Outcome], size: int) -> tuple[str, float]:
    """A table line, and the mean over the seeds where a seed that never got there counts the
    space's size (as if it had then measured every config)."""
    found = [o.trials for o in outcomes if o.trials is not None]
    line = (f"  {name:24s} found {len(found)}/{len(outcomes)}  "
            f"mean {statistics.fmean(found) if found else float('nan'):5.1f}  "
            f"worst {max(found) if found else '-'}")
    failed = [o.failed for o in outcomes if o.failed]
    if failed:
        line += f"  ({len(failed)} failed: {sorted(set(failed))[0]})"
    stalled = sum(o.stalled for o in outcomes)
    if stalled:
        line += f"  ({stalled} stopped by the time limit)"
    return line, statistics.fmean(size if o.trials is None else o.trials for o in outcomes)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default="sqlite:///arbiter.db")
    p.add_argument("--lane", default="x86_c")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--within", type=float, default=0.05)
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--samplers", default="tpe,random", help="Arbiter's, replayed alongside")
    p.add_argument("--limit", type=float, default=30.0,
                   help="seconds one Kernel Tuner replay may take (default 30)")
    p.add_argument("--region", help="one region (default: every swept one)")
    p.add_argument("--json", type=Path, help="write every replay's count here")
    args = p.parse_args()
    warnings.filterwarnings("ignore")  # Kernel Tuner: "no thread block dimensions" (a CPU space)
    import kernel_tuner  # noqa: F401  once, before the children fork

    totals: dict[str, list[float]] = {}
    out: list[dict] = []
    for sweep, results in swept(args.db):
        if args.region and sweep.region.name != args.region:
            continue
        mine = [r for r in results if r.lane == args.lane and r.status is not Status.INVALID]
        fitting = [r.latency for r in mine if r.fits(sweep.budget) and r.latency]
        if len(mine) < 2 or not fitting:
            continue
        goal = min(fitting) * (1 + args.within)
        near = sum(1 for t in fitting if t <= goal)
        print(f"{sweep.region.label} ({len(mine)} configs, {near} within the goal)", flush=True)
        row: dict[str, list[Outcome]] = {}
        for sampler in args.samplers.split(","):
            done = replay(mine, sweep.budget, sampler, range(args.seeds), args.within)
            row[f"arbiter {sampler}"] = [Outcome(t) for t in done.trials] if done else []
        for strategy in args.strategies.split(","):
            row[f"kt {strategy}"] = [_isolated(mine, sweep.budget, goal, strategy, s, args.limit)
                                     for s in range(args.seeds)]
        for name, outcomes in row.items():
            line, mean = _summary(name, outcomes, len(mine))
            print(line, flush=True)
            totals.setdefault(name, []).append(mean)
            out.append({"region": sweep.region.name, "configs": len(mine), "near": near,
                        "replayer": name, "trials": [o.trials for o in outcomes],
                        "failed": [o.failed for o in outcomes],
                        "stalled": [o.stalled for o in outcomes]})
    print("mean trials summed over the regions (a seed that never got there counts the size):")
    for name, means in sorted(totals.items(), key=lambda kv: sum(kv[1])):
        print(f"  {name:24s} {sum(means):6.1f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
