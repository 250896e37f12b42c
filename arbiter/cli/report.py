"""`arbiter report`: figures as PNG plus one HTML or Markdown page with the winners table."""

from __future__ import annotations

import argparse

from ..settings import settings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db", default=None, help="database URL (default: ARBITER_DB or sqlite:///arbiter.db)"
    )
    p.add_argument(
        "--out", default="arbiter-report", help="folder to write into (default: ./arbiter-report)"
    )
    p.add_argument("--format", choices=("html", "md"), default="html", help="page format")
    p.add_argument(
        "--reference",
        default=None,
        metavar="MODEL",
        help="draw a named machine's published peaks on the roofline (gfx1151)",
    )
    p.add_argument(
        "--panels",
        type=int,
        default=36,
        metavar="N",
        help="regions drawn at most per figure with a panel each (default 36; the winners "
        "table lists every one)",
    )
    p.add_argument(
        "--no-measure",
        action="store_true",
        help="do not measure this machine's ceilings when its records lack them",
    )


def main(args: argparse.Namespace) -> int:
    from .._errors import ArbiterError
    from ..report._work import REFERENCE_MODELS

    url = args.db or settings().db
    if args.reference is not None and args.reference not in REFERENCE_MODELS:
        raise ArbiterError(
            f"unknown reference model {args.reference!r} "
            f"(known: {', '.join(sorted(REFERENCE_MODELS))})"
        )
    from ..records import read_only
    from ..report import ensure_ceilings, open_records, write_report

    open_records(url)
    if not args.no_measure and not read_only(url):  # (nothing is recorded in a read-only one)
        measured = ensure_ceilings(url)
        if measured:
            print(f"measured this machine's ceilings: {', '.join(measured)}")
    if args.panels < 1:
        raise ArbiterError(f"--panels must be at least 1, got {args.panels}")
    written = write_report(url, args.out, fmt=args.format, reference=args.reference,
                           panels=args.panels)
    page = written.pop("page")
    print(f"wrote {page}")
    for path in written.values():
        print(f"wrote {path}")
    return 0
