"""`arbiter check`: each applicable lane's default config on every region, against the
oracle, in the worker process (a lane that crashes or hangs is a status in the table)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..api import spec_regions, usable_lanes
from ..check import budget_of, fresh_seeds
from ..lane import Status, refusal
from ..measure import Measurement, Worker, build_candidate
from ..region import Spec
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


def check(spec: str | Path | Spec, *, lanes: Sequence[str] | str | None = None,
          budget: float | None = None, timeout: float = 120.0) -> list[dict[str, Any]]:
    """A row per (region, applicable lane): the default config's verdict."""
    chosen = usable_lanes(lanes)
    rows = []
    with Worker(timeout=timeout) as worker:
        for region in spec_regions(spec):
            b = budget_of(region, budget)
            seeds = fresh_seeds()
            for lane in chosen:
                if refusal(lane, region) is not None:
                    continue
                built = build_candidate(lane, region, lane.space(region).default)
                m = built if isinstance(built, Measurement) else worker.check(
                    lane.name, region, built, b, seeds=seeds, timing=None)
                detail = "" if m.status is Status.OK else m.log.strip().splitlines()[-1:]
                rows.append({"region": region.name, "lane": lane.name, "status": m.status.value,
                             "rel_error": m.rel_error, "max_abs": m.max_abs, "budget": b,
                             "detail": detail[0] if detail else ""})
    return rows
