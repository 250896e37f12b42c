from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=["optuna"],
                   help="optuna: the searches as Optuna studies in the same database, for "
                   "optuna-dashboard")
    p.add_argument("--db", help="SQLAlchemy URL of the records (default: $ARBITER_DB or "
                   "sqlite:///arbiter.db)")


def main(args: argparse.Namespace) -> int:
    from ..api import export_optuna
    from ..settings import settings

    url = args.db or settings().db
    names = export_optuna(url)
    print(f"{url}: {len(names)} Optuna studies written (optuna-dashboard {url})")
    return 0
