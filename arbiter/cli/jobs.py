"""`arbiter jobs`: the tune jobs in the database, one job's progress, or cancel one."""

from __future__ import annotations

import argparse

from ._table import print_json, print_table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", nargs="?", type=int, help="one job's regions and who swept them")
    p.add_argument("--db", help="SQLAlchemy URL of the records (default: $ARBITER_DB or "
                   "sqlite:///arbiter.db)")
    p.add_argument("--cancel", action="store_true", help="cancel the job: workers take no "
                   "more of its regions (a region being swept is finished)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def main(args: argparse.Namespace) -> int:
    from .._errors import ArbiterError
    from ..records import Queue
    from ..settings import settings

    queue = Queue(args.db or settings().db, create=False)
    if args.cancel:
        if args.job is None:
            raise ArbiterError("--cancel needs a job id")
        queue.cancel(args.job)
    if args.job is not None:
        st = queue.status(args.job)
        if args.json:
            print_json(st)
            return 0
        print(f"job {st['id']}: {st['state']}, {st['progress']['done']}/"
              f"{st['progress']['regions']} regions done, submitted {st['created_at']}")
        rows = []
        for r in st["regions"]:
            for f in r["finished"]:
                rows.append({"region": r["name"], "fingerprint": f["fingerprint"],
                             "state": f["state"], "lane": f["row"].get("lane"),
                             "worker": f["worker"], "detail": f["error"]})
            for h in r["running"]:
                rows.append({"region": r["name"], "fingerprint": h["fingerprint"],
                             "state": f"running (silent {h['silent_s']:g} s)",
                             "worker": h["worker"]})
            if not r["finished"] and not r["running"]:
                rows.append({"region": r["name"], "state": "waiting"})
        print_table(rows, ["region", "fingerprint", "state", "lane", "worker", "detail"])
        return 0
    statuses = [queue.status(i) for i in queue.jobs()]
    if args.json:
        print_json(statuses)
        return 0
    print_table([{"job": s["id"], "state": s["state"], "source": s["source"],
                  "regions": s["progress"]["regions"], "done": s["progress"]["done"],
                  "running": s["progress"]["running"], "failed": s["progress"]["failed"],
                  "submitted": s["created_at"]} for s in statuses],
                ["job", "state", "source", "regions", "done", "running", "failed",
                 "submitted"])
    return 0
