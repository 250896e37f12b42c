"""Arbiter's samplers against Kernel Tuner's strategies on the same recorded spaces, nothing
measured: for each region of a database, one lane's recorded configs are written as a Kernel
Tuner cache file and replayed in its simulation mode; the same configs are replayed through
`tune`'s search (`arbiter.search.replay`). Both count the configs evaluated until one within
the budget is within `--within` of the best recorded latency.

    pip install kernel_tuner==1.5.0
    python3 bench/kernel_tuner_replay.py --db sqlite:///arbiter.db --lane x86_c --seeds 20
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import warnings
from pathlib import Path

import numpy as np

from arbiter.cli._swept import swept
from arbiter.lane import Status
from arbiter.search import recorded_space, replay

STRATEGIES = ("random_sample", "genetic_algorithm", "simulated_annealing", "greedy_ils",
              "diff_evo", "pso", "firefly_algorithm", "dual_annealing", "bayes_opt")


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


def _kernel_tuner(results: list, budget: float, goal: float, strategy: str,
                  seed: int) -> int | None:
    from kernel_tuner import tune_kernel

    [(lane, space)] = recorded_space(results).items()
    params = {t.name: list(t.choices) for t in space.tunables}
    keys = {",".join(str(r.config.as_dict()[k]) for k in params) for r in results}
    with tempfile.TemporaryDirectory() as d:
        cache = Path(d) / "cache.json"
        _cache(cache, lane, results, params, budget)
        random.seed(seed)
        np.random.seed(seed)
        evaluated, _ = tune_kernel(
            lane, "/* replayed from the records */", 1, [], params, lang="C",
            simulation_mode=True, cache=str(cache), strategy=strategy,
            strategy_options={"max_fevals": len(keys)},
            restrictions=[_only(keys, list(params))],
            verbose=False, quiet=True)
    seen = set()
    for r in evaluated:
        key = ",".join(str(r[k]) for k in params)
        if key in seen:
            continue
        seen.add(key)
        t = r.get("time")
        if "__error__" not in r and isinstance(t, float) and t * 1e-3 <= goal:
            return len(seen)
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", default="sqlite:///arbiter.db")
    p.add_argument("--lane", default="x86_c")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--within", type=float, default=0.05)
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    args = p.parse_args()
    warnings.filterwarnings("ignore")  # Kernel Tuner: "no thread block dimensions" (a CPU space)
    totals: dict[str, list[float]] = {}
    for sweep, results in swept(args.db):
        mine = [r for r in results if r.lane == args.lane and r.status is not Status.INVALID]
        fitting = [r.latency for r in mine if r.fits(sweep.budget) and r.latency]
        if len(mine) < 2 or not fitting:
            continue
        goal = min(fitting) * (1 + args.within)
        row = {}
        for sampler in ("tpe", "random"):
            done = replay(mine, sweep.budget, sampler, range(args.seeds), args.within)
            row[f"arbiter {sampler}"] = list(done.trials) if done else []
        for strategy in args.strategies.split(","):
            try:
                row[f"kt {strategy}"] = [_kernel_tuner(mine, sweep.budget, goal, strategy, s)
                                         for s in range(args.seeds)]
            except Exception as e:  # noqa: BLE001  a strategy that cannot run here is said
                print(f"  kt {strategy}: {type(e).__name__}: {e}")
        print(f"{sweep.region.label} ({len(mine)} configs)")
        for name, trials in row.items():
            found = [t for t in trials if t is not None]
            mean = statistics.fmean(found) if found else float("nan")
            totals.setdefault(name, []).append(mean if len(found) == len(trials) else len(mine))
            print(f"  {name:24s} found {len(found)}/{len(trials)}  mean {mean:5.1f}  "
                  f"worst {max(found) if found else '-'}")
    print("mean trials summed over the regions (a region not always found counts its size):")
    for name, means in sorted(totals.items(), key=lambda kv: sum(kv[1])):
        print(f"  {name:24s} {sum(means):6.1f}")


if __name__ == "__main__":
    main()
