from __future__ import annotations

import argparse

from ..api import check
from ._table import print_json, print_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="region spec file (TOML)")
    p.add_argument("--lanes", help="comma-separated lane names (default: all available)")
    p.add_argument("--budget", type=float, help="relative error budget for every region")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    lanes = args.lanes.split(",") if args.lanes else None
    rows = check(args.spec, lanes=lanes, budget=args.budget)
    if args.json:
        print_json(rows)
    else:
        print_table(rows, ["region", "lane", "status", "rel_error", "budget", "detail"])
    return 0 if rows and all(r["status"] == "ok" for r in rows) else 1
