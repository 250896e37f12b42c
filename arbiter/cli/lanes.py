from __future__ import annotations

import argparse

from ..api import lane_table
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
