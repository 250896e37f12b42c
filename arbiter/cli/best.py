from __future__ import annotations

import argparse
from typing import Any

from .._errors import ArbiterError, one_line
from ..api import best, empty_row, spec_regions
from ..check import budget_of
from ._table import print_json, print_table
from .tune import table_row

COLUMNS = ["region", "dtype", "lane", "config", "precision", "latency_ms", "interval_ms",
           "rel_error",
           "status"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="region spec file (TOML)")
    p.add_argument("region", nargs="?", help="one region of the spec (default: all)")
    p.add_argument("--db", help="SQLAlchemy URL of the records (default: $ARBITER_DB or "
                   "sqlite:///arbiter.db)")
    p.add_argument("--budget", type=float,
                   help="relative error budget (default: the region's); answered from the "
                   "recorded latency/error results without re-measuring")
    p.add_argument("--verify", action="store_true",
                   help="a shape never tuned, answered by the nearest tuned shape: check that "
                   "config against the oracle at this shape first (and record the check)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    rows = best_rows(args.spec, args.region, budget=args.budget, db=args.db,
                     verify=args.verify)
    if args.json:
        print_json(rows)
    else:
        print_table([table_row(r) for r in rows], COLUMNS)
        for r in rows:
            if r.get("detail"):
                print(f"{r['region']}: {r['detail']}")
    return 0 if all(r["lane"] for r in rows) else 1


def best_rows(spec: str, region_name: str | None = None, *, budget: float | None = None,
              db: str | None = None, verify: bool = False) -> list[dict[str, Any]]:
    """`arbiter best`: one row per region asked (all the spec's regions when none named)."""
    from ..records import Records
    from ..settings import settings

    Records(db or settings().db, create=False)  # a database that is not there: one line
    if region_name:
        return [best(r, budget=budget, db=db, verify=verify)
                for r in spec_regions(spec, [region_name])]
    rows = []
    for r in spec_regions(spec):
        try:
            rows.append(best(r, budget=budget, db=db, verify=verify))
        except ArbiterError as e:
            rows.append(empty_row(r, budget_of(r, budget), "no answer",
                                  detail=one_line(str(e))))
    return rows
