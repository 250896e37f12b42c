from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    sub.required = True
    up = sub.add_parser("upgrade", help="migrate the records to this arbiter's schema")
    up.add_argument("--db", help="SQLAlchemy URL (default: $ARBITER_DB or sqlite:///arbiter.db)")


def main(args: argparse.Namespace) -> int:
    from .._errors import masked_url
    from ..records import upgrade
    from ..settings import settings

    url = args.db or settings().db
    before, after = upgrade(url)
    shown = masked_url(url)
    if before == after:
        print(f"{shown}: already at schema {after}")
    else:
        print(f"{shown}: schema {before or 'empty'} -> {after}")
    return 0
