from __future__ import annotations

import argparse

from ..api import DEFAULT_TIMEOUT, DEFAULT_TRIALS
from ._table import print_json, print_table

COLUMNS = ["region", "dtype", "lane", "config", "precision", "latency_ms", "interval_ms",
           "rel_error",
           "status", "new_trials"]


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
                   help="seconds one candidate may take to be checked and timed in its worker "
                   f"(default {DEFAULT_TIMEOUT:g})")
    p.add_argument("--seed", type=int, help="sampler seed: the same draws on fresh records (TPE's "
                   "own proposals then follow the timings; README)")
    p.add_argument("--sampler", help="tpe (default), tpe-startup5, tpe-independent, gp, random")
    p.add_argument("--config", action="extend", nargs="+", default=[], metavar="K=V",
                   help="fix a tunable to one value (K: every lane that has it; lane.K: one "
                   "lane); one or more, repeatable")
    p.add_argument("--exclude", action="extend", nargs="+", default=[], metavar="K=V",
                   help="leave a tunable's value out (as --config names it)")
    p.add_argument("--where", action="append", default=[], metavar="EXPR",
                   help="a restriction over tunables, e.g. \"threads <= 2 and kc != 512\" "
                   "(comparisons, arithmetic, and/or/not, in); repeatable")
    p.add_argument("--equivalence", type=float, default=0.02, metavar="BAND",
                   help="two finalists within this relative band are a tie (default 0.02)")
    p.add_argument("--workers", type=int, metavar="N", help="submit the spec as a job and "
                   "sweep it with N local workers (one GPU each where there are GPUs, "
                   "disjoint CPU sets); other machines' `arbiter worker`s join in")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def config_text(config: dict | None) -> str:
    if config is None:
        return "-"
    return " ".join(f"{k}={v}" for k, v in sorted(config.items())) or "(default)"


def table_row(row: dict) -> dict:
    """A winner's row as people read it: config as k=v, the interval, an unstable flag."""
    low, high = row.get("latency_low_ms"), row.get("latency_high_ms")
    status = row["status"] + (", unstable" if row.get("unstable") else "")
    return dict(row, config=config_text(row["config"]), status=status,
                interval_ms=None if low is None else f"{low:.3g}-{high:.3g}")


def main(args: argparse.Namespace) -> int:
    from ..api import tune

    lanes = args.lanes.split(",") if args.lanes else None
    options = dict(trials=args.trials, budget=args.budget, timeout=args.timeout,
                   seed=args.seed, sampler=args.sampler or "tpe", equivalence=args.equivalence,
                   config=args.config, exclude=args.exclude, where=args.where)
    if args.workers is not None:
        from ..service.workers import tune_across

        rows = tune_across(args.spec, args.workers, db=args.db, lanes=lanes,
                           progress=not args.json, **options)
    else:
        rows = tune(args.spec, db=args.db, lanes=lanes, progress=not args.json, **options)
    if args.json:
        print_json(rows)
    else:
        print_table([table_row(r) for r in rows], COLUMNS)
    return 0 if rows and all(r["lane"] for r in rows) else 1
