from __future__ import annotations

import argparse

from ..api import run_npz


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="region spec file (TOML)")
    p.add_argument("region", help="region name in the spec")
    p.add_argument("--lane", help="lane to run (default: the recorded winner on this machine)")
    p.add_argument("--db", help="records to find the winner in (default: $ARBITER_DB or "
                   "sqlite:///arbiter.db)")
    p.add_argument("--config", action="extend", nargs="+", default=[], metavar="K=V",
                   help="tunable values (one or more, repeatable); others take the lane's "
                   "defaults")
    p.add_argument("--inputs", required=True, help=".npz with the input arrays; missing ones "
                   "are drawn from a seeded normal distribution and saved")
    p.add_argument("--output", required=True, help=".npz to write: 'out' plus the inputs used")
    p.add_argument("--seed", type=int, default=0, help="seed for missing inputs (default 0)")


def main(args: argparse.Namespace) -> int:
    info = run_npz(args.spec, args.region, lane=args.lane, config=args.config,
                   inputs=args.inputs, output=args.output, seed=args.seed, db=args.db)
    winner = "recorded winner " if info["recorded"] else ""
    print(f"wrote {args.output}: out{info['shape']} from {winner}lane {info['lane']} "
          f"({info['config']}); drawn inputs: {', '.join(info['drawn']) or 'none'}")
    return 0
