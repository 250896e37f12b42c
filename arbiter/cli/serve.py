"""`arbiter serve`: the records over HTTP (winners, jobs, a live report page, metrics)."""

from __future__ import annotations

import argparse
import os
import sys

from .._errors import ArbiterError

LOCAL = ("127.0.0.1", "localhost", "::1")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="SQLAlchemy URL of the records (default: $ARBITER_DB or "
                   "sqlite:///arbiter.db)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; any other needs --token)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument("--token", help="bearer token every request must carry (default: "
                   "$ARBITER_TOKEN; required unless bound to localhost)")


def main(args: argparse.Namespace) -> int:
    from .._errors import masked_url
    from ..settings import settings

    token = args.token or os.environ.get("ARBITER_TOKEN") or None
    if args.host not in LOCAL and not token:
        raise ArbiterError(f"--host {args.host} serves other machines: give --token (or "
                           "$ARBITER_TOKEN), a bearer token every request must carry")
    if not 0 < args.port < 65536:
        raise ArbiterError(f"--port must be in 1..65535, got {args.port}")
    if token is not None and (len(token) < 8 or not token.isprintable() or " " in token):
        raise ArbiterError("--token must be at least 8 printable characters, no spaces")
    import uvicorn

    from ..service.app import make_app

    url = args.db or settings().db
    app = make_app(url, token=token)
    print(f"arbiter: serving {masked_url(url)} on http://{args.host}:{args.port}/",
          file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0
