"""Warm-cache exhaustive sweeps of bench/arbiter_overhead.py's region: the same candidates in
every run, so trees can be compared on the arbiter's time per trial and on each candidate's
recorded median (does a change move what is measured?).

    python3 bench/warm_exhaustive.py run OUT.json [--sweeps N]   # from a tree's root
    python3 bench/warm_exhaustive.py compare A.json B.json ...

`run`: one exhaustive sweep fills a fresh build cache, then N (2) more, each into a new
database, on that cache; prints each one's literal ms per trial (the issue's formula) and
split, and writes them with every candidate's median. `compare`: for each pair of sweeps,
the geometric mean and median of the per-candidate median ratios and the spread of their
logs (the run-to-run noise is the pairs within one tree).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import arbiter_overhead as ao  # noqa: E402


def run(out: Path, sweeps: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="arbiter-warm-exhaustive-"))
    os.environ["ARBITER_CACHE_DIR"] = str(tmp / "cache")
    ao._byte_compiled()
    ao.sweep(tmp)
    found = []
    for i in range(sweeps):
        r = ao.sweep(tmp, db=f"warm{i}.db")
        rows = sqlite3.connect(tmp / f"warm{i}.db").execute(
            "select c.config_key, m.median from measurements m join candidates c"
            " on c.id = m.candidate_id where m.kind = 'sweep' and m.median is not null"
        ).fetchall()
        found.append({"literal": r["total_minus_build_and_kernel_ms_per_trial"],
                      "oracle": r["oracle_check_ms_per_trial"],
                      "verify": r["verification_runs_ms_per_trial"],
                      "timing": r["kernel_timing_ms_per_trial"],
                      "steady_median": r["steady_ms_per_trial"]["median"],
                      "trials": r["trials"], "medians": dict(rows)})
        print(json.dumps({k: v for k, v in found[-1].items() if k != "medians"}), flush=True)
    out.write_text(json.dumps(found))


def compare(paths: list[str]) -> None:
    sweeps = [(Path(p).name, i, s["medians"]) for p in paths
              for i, s in enumerate(json.loads(Path(p).read_text()))]
    for j, (n1, i1, a) in enumerate(sweeps):
        for n2, i2, b in sweeps[j + 1:]:
            keys = sorted(set(a) & set(b))
            logs = [math.log(b[k] / a[k]) for k in keys]
            print(f"{n1}[{i1}] -> {n2}[{i2}]: {len(keys)} candidates, ratio geomean "
                  f"{math.exp(statistics.mean(logs)):.3f}, median "
                  f"{math.exp(statistics.median(logs)):.3f}, log sd {statistics.pstdev(logs):.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--sweeps", type=int, default=2)
    c = sub.add_parser("compare")
    c.add_argument("files", nargs="+")
    args = ap.parse_args()
    if args.what == "run":
        run(args.out, args.sweeps)
    else:
        compare(args.files)


if __name__ == "__main__":
    main()
