"""The arbiter's own share of a sweep's wall time, on the example spec.

    python3 bench/arbiter_overhead.py [--trials 30] [--lanes numpy,x86_c] [--out FILE.json]

Tunes `examples/regions.toml` three times, each in a fresh interpreter and into a fresh
database, as `arbiter tune` does: with an empty build cache and the random sampler (seed 1:
cold, every candidate compiles), then the same again on the cache that run filled (warm: the
same proposals, nothing compiles), then with the default sampler (TPE) on that cache (its
proposals follow the measured latencies, so a few may still compile: those build batches are
counted apart). The split of each run's wall time (timed in the driver, around the library's
own functions; nothing here changes what they do):

- kernel: the candidates' own calls: every timed sample, plus the warm-up calls and the two
  verification runs, counted at the candidate's latency (from the measurements returned);
- waited: seconds the timings waited for a busy machine to quiet down;
- compile: the wall time of build batches in which something compiled;
- oracle: the float64 references (two seeds a region) and the comparisons, timed here on the
  same regions (they run in the worker);
- own: the rest: start-up (imports, schema, fingerprint, the worker's start), the search
  (Optuna), the records, build-cache lookups, the worker's messages and bookkeeping.

The issue's target: own < 10% of a warm-cache sweep's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "examples" / "regions.toml"

DRIVER = r"""
import json, sys, time
t_start = time.perf_counter()
import arbiter
from arbiter import api, sweep
from arbiter.measure import ROUND_CALLS, Timing, Worker
spec, db, trials, lanes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] or None
sampler, seed = sys.argv[5], int(sys.argv[6]) if sys.argv[6] else None
acc = {"kernel": 0.0, "waited": 0.0, "compile": 0.0, "worker": 0.0, "builds": 0.0,
       "records": 0.0, "search": 0.0, "checked": 0}
t = Timing()

def count(m, final):
    if m.latency is None:
        return
    acc["checked"] += 1
    calls = len(m.samples) // ROUND_CALLS if final else len(m.samples) // (
        t.rounds * ROUND_CALLS) * t.warmup
    acc["kernel"] += sum(m.samples) + m.latency * (calls + 2)
    acc["waited"] += m.waited

check, finals, build_all = Worker.check, Worker.finals, sweep.build_all

def timed_check(self, *a, **kw):
    t0 = time.perf_counter()
    m = check(self, *a, **kw)
    acc["worker"] += time.perf_counter() - t0
    count(m, False)
    return m

def timed_finals(self, *a, **kw):
    t0 = time.perf_counter()
    ms = finals(self, *a, **kw)
    acc["worker"] += time.perf_counter() - t0
    for m in ms:
        count(m, True)
    return ms

def timed_builds(items):
    t0 = time.perf_counter()
    built = build_all(items)
    spent = time.perf_counter() - t0
    acc["compile" if any(not getattr(b, "cached", True) for b in built) else "builds"] += spent
    return built

def timed(cls, name, key):
    real = getattr(cls, name)
    def wrapper(*a, **kw):
        t0 = time.perf_counter()
        try:
            return real(*a, **kw)
        finally:
            acc[key] += time.perf_counter() - t0
    setattr(cls, name, wrapper)

from arbiter.records import Records
from arbiter.search import Search
for name in ("record", "results", "save_winner", "winners", "ids"):
    timed(Records, name, "records")
for name in ("propose", "told"):
    timed(Search, name, "search")
Worker.check, Worker.finals, sweep.build_all = timed_check, timed_finals, timed_builds
api.tune(spec, db=db, trials=trials, lanes=lanes, sampler=sampler, seed=seed)
acc["wall"] = time.perf_counter() - t_start
print(json.dumps(acc))
"""


def oracle_seconds(checked: int) -> float:
    """The references of every region's two seeds, and `checked` pairs of comparisons of an
    output of the spec's average size."""
    import numpy as np

    from arbiter import load_spec
    from arbiter.check import compare, random_inputs, reference

    regions = list(load_spec(SPEC))
    t0 = time.perf_counter()
    refs = [reference(r, random_inputs(r, seed)) for r in regions for seed in (1, 2)]
    made = time.perf_counter() - t0
    t0 = time.perf_counter()
    for ref in refs:
        compare(ref.astype(np.float32), ref, 1e-3)
    per_compare = (time.perf_counter() - t0) / len(refs)
    return made + checked * 2 * per_compare


def run(db: Path, cache: Path, trials: int, lanes: str | None, sampler: str,
        seed: int | None) -> dict:
    env = dict(os.environ, ARBITER_CACHE_DIR=str(cache))
    p = subprocess.run([sys.executable, "-c", DRIVER, str(SPEC), f"sqlite:///{db}",
                        str(trials), lanes or "", sampler, "" if seed is None else str(seed)],
                       env=env, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"tune failed: {p.stderr}")
    return json.loads(p.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--lanes", help="default: every available lane")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    out = {"trials": args.trials, "lanes": args.lanes or "all available",
           "cpus": len(os.sched_getaffinity(0)), "runs": {}}
    with tempfile.TemporaryDirectory(prefix="arbiter-overhead-") as tmp:
        cache = Path(tmp) / "cache"
        for name, sampler, seed in (("cold", "random", 1), ("warm", "random", 1),
                                    ("warm-tpe", "tpe", None)):
            acc = run(Path(tmp) / f"{name}.db", cache, args.trials, args.lanes, sampler, seed)
            oracle = oracle_seconds(acc["checked"])
            own = acc["wall"] - acc["kernel"] - acc["waited"] - acc["compile"] - oracle
            row = {k: round(v, 2) for k, v in acc.items()}
            row.update(oracle=round(oracle, 2), own=round(own, 2),
                       own_share=round(own / acc["wall"], 3))
            out["runs"][name] = row
            rest = (own - acc["records"] - acc["search"] - acc["builds"]
                    - (acc["worker"] - acc["kernel"] - acc["waited"] - oracle))
            print(f"{name}: wall {acc['wall']:.1f} s = kernel {acc['kernel']:.1f} + waited "
                  f"{acc['waited']:.1f} + compile {acc['compile']:.1f} + oracle {oracle:.1f} "
                  f"+ own {own:.1f} s ({own / acc['wall']:.1%}); {acc['checked']} timed "
                  f"measurements. Own: records {acc['records']:.1f}, search "
                  f"{acc['search']:.1f}, build lookups {acc['builds']:.1f}, worker's own "
                  f"{acc['worker'] - acc['kernel'] - acc['waited'] - oracle:.1f}, start-up "
                  f"and the rest {rest:.1f}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
