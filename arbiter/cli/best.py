from __future__ import annotations

import argparse

from ._table import print_json, print_table
from .tune import table_row

COLUMNS = ["region", "lane", "config", "precision", "latency_ms", "interval_ms", "rel_error",
           "status"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="region spec file (TOML)")
    p.add_argument("region", nargs="?", help="one region of the spec (default: all)")
    p.add_argument("--db", help="SQLAlchemy URL of the records (default: $ARBITER_DB or "
                   "sqlite:///arbiter.db)")
    p.add_argument("--budget", type=float,
                   help="relative error budget (default: the region's); answered from the "
                   "recorded latency/error results without re-measuring")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    from ..api import best_rows

    rows = best_rows(args.spec, args.region, budget=args.budget, db=args.db)
    if args.json:
        print_json(rows)
    else:
        print_table([table_row(r) for r in rows], COLUMNS)
        for r in rows:
            if r.get("detail"):
                print(f"{r['region']}: {r['detail']}")
    return 0 if all(r["lane"] for r in rows) else 1
