from __future__ import annotations

import argparse

from .._api import DEFAULT_TIMEOUT, DEFAULT_TRIALS
from ._table import print_json, print_table

COLUMNS = ["region", "lane", "config", "precision", "latency_ms", "rel_error", "status",
           "new_trials"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="region spec file (TOML)")
    p.add_argument("--db", help="SQLAlchemy URL of the records (default: $ARBITER_DB or "
                   "sqlite:///arbiter.db)")
    p.add_argument("--trials", type=int, default=DEFAULT_TRIALS,
                   help="distinct candidates per region to have measured here "
                   f"(default {DEFAULT_TRIALS})")
    p.add_argument("--lanes", help="comma-separated lane names (default: all available)")
    p.add_argument("--budget", type=float, help="relative error budget for every region")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help="seconds one candidate may take to build, check and time "
                   f"(default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--seed", type=int, help="sampler seed: the same draws on fresh records (TPE's "
                   "own proposals then follow the timings; README)")
    p.add_argument("--sampler", help="tpe (default), tpe-startup5, tpe-independent, gp, random")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def config_text(config: dict | None) -> str:
    if config is None:
        return "-"
    return " ".join(f"{k}={v}" for k, v in sorted(config.items())) or "(default)"


def main(args: argparse.Namespace) -> int:
    from .._api import tune
    from .._samplers import DEFAULT_SAMPLER

    lanes = args.lanes.split(",") if args.lanes else None
    rows = tune(args.spec, db=args.db, trials=args.trials, lanes=lanes, budget=args.budget,
                timeout=args.timeout, seed=args.seed, sampler=args.sampler or DEFAULT_SAMPLER,
                progress=not args.json)
    if args.json:
        print_json(rows)
    else:
        print_table([dict(r, config=config_text(r["config"])) for r in rows], COLUMNS)
    return 0 if rows and all(r["lane"] for r in rows) else 1
