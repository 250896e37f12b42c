"""`arbiter replay`: the recorded sweeps replayed without measuring, to see how many trials each
sampler needs to come within a margin of the best recorded latency (`search.replay`)."""

from __future__ import annotations

import argparse

from .._errors import ArbiterError
from ..settings import settings
from ._swept import swept
from ._table import print_json, print_table

COLUMNS = ["region", "environment", "sampler", "space", "best_ms", "seeds", "found",
           "median_trials", "mean_trials", "worst_trials"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="SQLAlchemy URL of the records (default: $ARBITER_DB or "
                   "sqlite:///arbiter.db)")
    p.add_argument("--sampler", default="tpe,random",
                   help="comma-separated samplers to replay (default tpe,random)")
    p.add_argument("--seeds", type=int, default=10, metavar="N",
                   help="replays per sampler and region, seeds 0..N-1 (default 10)")
    p.add_argument("--within", type=float, default=0.05, metavar="X",
                   help="done when a candidate is within this fraction of the best recorded "
                   "latency (default 0.05)")
    p.add_argument("--region", help="one region (default: every swept one)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    from ..report._frames import environment_label
    from ..search import check_sampler, replay

    samplers = [s.strip() for s in args.sampler.split(",") if s.strip()]
    for s in samplers or [""]:
        check_sampler(s)
    if not 1 <= args.seeds <= 1000:
        raise ArbiterError(f"--seeds must be in 1..1000, got {args.seeds}")
    if not 0 <= args.within < 10:
        raise ArbiterError(f"--within must be a fraction in [0, 10), got {args.within}")
    url = args.db or settings().db
    rows = []
    for sweep, results in swept(url):
        if args.region and sweep.region.name != args.region:
            continue
        for sampler in samplers:
            done = replay(results, sweep.budget, sampler, range(args.seeds), args.within)
            if done is not None:
                rows.append({"region": sweep.region.label, "region_key": sweep.region.key,
                             "environment": environment_label(sweep.details),
                             "fingerprint": sweep.fingerprint, **done.row()})
    if not rows:
        raise ArbiterError(f"no recorded sweep to replay in {url}" + (
            f" for region {args.region!r}" if args.region else ""))
    if args.json:
        print_json(rows)
    else:
        print_table(rows, COLUMNS)
    return 0
