"""The `arbiter` command line: a table of subcommands, each a small module.

Every subcommand module offers `add_arguments(parser)` and `main(args) -> int`. User mistakes
surface as one `arbiter: error: ...` line and exit code 2; never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading

from .._errors import ArbiterError, one_line

__all__ = ["console", "main"]

# name -> (module, one-line help)
COMMANDS = {
    "lanes": ("lanes", "list lanes, their platform and whether they can run here"),
    "check": ("check", "check every available lane's default config against the oracle"),
    "run": ("run", "run one region on arrays from an .npz file"),
    "report": ("report", "write latency figures (PNG) and an HTML/Markdown report"),
    "tune": ("tune", "search lanes and configs for every region and record the winners"),
    "worker": ("worker", "take regions of tune jobs from a shared database until stopped"),
    "jobs": ("jobs", "tune jobs in a shared database: list, progress, cancel"),
    "serve": ("serve", "answer winners, take tune jobs and show the report over HTTP"),
    "best": ("best", "the recorded winner for each region (from the records, no re-measuring)"),
    "db": ("db", "record-store maintenance: `arbiter db upgrade`"),
    "emit": ("emit", "print a lane's generated source (or ISA / PTX / asm with --asm)"),
    "export": ("export", "the records as CSV, Parquet or JSON, or as Optuna studies"),
    "replay": ("replay", "replay recorded sweeps without measuring: trials each sampler needs"),
}


def _parser() -> argparse.ArgumentParser:
    from .. import __version__

    p = argparse.ArgumentParser(prog="arbiter", description="Autotuning arbiter for fused kernels.")
    p.add_argument("--version", action="version", version=f"arbiter {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module, help_text) in COMMANDS.items():
        sp = sub.add_parser(name, help=help_text, description=help_text)
        mod = importlib.import_module(f"{__name__}.{module}")
        mod.add_arguments(sp)
        sp.set_defaults(_module=mod)
    return p


def _end_on(signum: int, frame: object) -> None:
    # SIGTERM (`timeout`, a CI job cancelled) or SIGHUP: the worker leads a process group of
    # its own and does not get it; ending by an exception closes it, as an interrupt does
    raise SystemExit(128 + signum)


def _databases(args: argparse.Namespace | None) -> list[str]:
    """The database URLs a command was given (their credentials are never printed)."""
    from ..settings import settings

    return [u for u in (getattr(args, "db", None), settings().db) if u]


def _reader_left() -> int:
    """`arbiter ... | head`: the reader left; what is still unwritten goes nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 141


def _interrupted_while_importing(signum: int, frame: object) -> None:
    # an exception raised inside an extension module's import comes out as its ImportError
    # (numpy's, with pages of advice); nothing is open yet that needs closing
    print("arbiter: interrupted", file=sys.stderr, flush=True)
    os._exit(130)


def main(argv: list[str] | None = None) -> int:
    args = None
    main_thread = threading.current_thread() is threading.main_thread()
    try:
        if main_thread and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _interrupted_while_importing)
            try:
                args = _parser().parse_args(argv)  # (the subcommands import numpy and more)
            finally:
                signal.signal(signal.SIGINT, signal.default_int_handler)
        else:
            args = _parser().parse_args(argv)
        if main_thread:
            for sig in (signal.SIGTERM, signal.SIGHUP):
                if signal.getsignal(sig) is signal.SIG_DFL:
                    signal.signal(sig, _end_on)
        return int(args._module.main(args) or 0)
    except ArbiterError as e:
        print(f"arbiter: error: {one_line(str(e), *_databases(args))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("arbiter: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # no traceback for that
        return _reader_left()


def console() -> int:
    """The `arbiter` command: `main`, then the databases closed (SQLite folds its write-ahead
    log into the file at the last close)."""
    code = main()
    try:  # output to a pipe waits in a buffer till here: the reader may have left meanwhile
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_left()
    records = sys.modules.get("arbiter.records._session")  # none where it was never imported
    if records is not None:
        records.close_engines()
    return code
