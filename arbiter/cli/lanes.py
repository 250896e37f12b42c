"""`arbiter lanes`: every registered lane, its platform and whether it can run here."""

from __future__ import annotations

import argparse
from typing import Any

from .._errors import LaneError
from ..lane import get_lane, lane_names
from ._table import print_json, print_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    rows = lane_table()
    if args.json:
        print_json(rows)
    else:
        print_table(rows, ["name", "platform", "available", "reason"])
    return 0


def lane_table() -> list[dict[str, Any]]:
    rows = []
    for name in lane_names():
        try:
            lane = get_lane(name)
            av = lane.available()
            rows.append({"name": name, "platform": lane.platform.value,
                         "available": bool(av.ok), "reason": av.reason})
        except Exception as e:  # noqa: BLE001  a broken plug-in is reported, not fatal
            rows.append({"name": name, "platform": "?", "available": False,
                         "reason": str(e) if isinstance(e, LaneError)
                         else f"{type(e).__name__}: {e}"})
    return rows
