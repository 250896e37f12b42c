"""`arbiter worker`: take regions of tune jobs from the database until stopped."""

from __future__ import annotations

import argparse
import os
import re

from .._errors import ArbiterError

DEVICE = re.compile(r"[A-Za-z0-9-]{1,64}")  # an index or a GPU UUID (GPU-..., MIG-...)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="SQLAlchemy URL of the shared records, e.g. "
                   "postgresql+psycopg://user@host/arbiter (default: $ARBITER_DB)")
    p.add_argument("--lanes", help="comma-separated lanes this worker offers (default: all "
                   "available here)")
    p.add_argument("--device", help="the GPU this worker owns (sets CUDA_VISIBLE_DEVICES and "
                   "HIP_VISIBLE_DEVICES)")
    p.add_argument("--cpus", help="CPUs this worker runs on, e.g. 0-3 or 0,2 (default: all "
                   "this process may use)")
    p.add_argument("--job", type=int, help="only this job's regions")
    p.add_argument("--until-done", action="store_true", help="exit when the job (or every "
                   "job) has no region left for this machine's environment")
    p.add_argument("--lease", type=float, metavar="SECONDS", help="silence after which "
                   "another worker takes over this worker's region (default 60)")
    p.add_argument("--poll", type=float, default=2.0, metavar="SECONDS",
                   help="how often an idle worker looks for work (default 2)")


def cpu_list(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if m is None:
            raise ArbiterError(f"--cpus: expected a list like 0-3,6, got {text!r}")
        lo, hi = int(m[1]), int(m[2] or m[1])
        cpus.update(range(lo, hi + 1))
    return cpus


def main(args: argparse.Namespace) -> int:
    from ..service.workers import work
    from ..settings import settings

    if args.cpus is not None:
        try:
            os.sched_setaffinity(0, cpu_list(args.cpus))
        except (OSError, ValueError) as e:
            raise ArbiterError(f"--cpus {args.cpus}: {e}") from None
    if args.device is not None:
        if not DEVICE.fullmatch(args.device):
            raise ArbiterError(f"--device: expected a GPU index or UUID, got {args.device!r}")
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ["HIP_VISIBLE_DEVICES"] = args.device
    for name in ("lease", "poll"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            raise ArbiterError(f"--{name} must be positive, got {v:g}")
    work(args.db or settings().db, lanes=args.lanes.split(",") if args.lanes else None,
         job_id=args.job, until_done=args.until_done, poll=args.poll,
         lease_seconds=args.lease)
    return 0
