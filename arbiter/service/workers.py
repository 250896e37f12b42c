"""Workers: processes that take regions of tune jobs from the database and sweep them.

Any number of workers, on any number of machines, share one database (PostgreSQL; SQLite for
workers of one machine). A worker takes a region by its lease (`records.Lease`), sweeps it
whole (its candidates, then its finalists' interleaved rounds, all on this worker's device),
records what it made of it for the job, and lets the lease go. A worker killed mid-sweep
leaves the lease to go silent; a worker of the same environment then takes it over and
resumes from the records. Each environment (fingerprint: one GPU kind, one CPU set size)
sweeps every region of a job once, so a cluster of mixed machines keeps one answer per kind.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from .._errors import ArbiterError, StoreError, masked_url, one_line
from ..api import (
    check_restriction,
    empty_row,
    spec_regions,
    sweep_regions,
    tune_settings,
    usable_lanes,
)
from ..check import budget_of
from ..lane import Lane
from ..measure import Worker
from ..settings import settings

__all__ = ["MAX_TAKEOVERS", "local_workers", "tune_across", "work"]

MAX_TAKEOVERS = 3  # a region whose holders went silent this often is given up (it kills them)
OPTIONS = ("trials", "budget", "timeout", "seed", "sampler", "equivalence", "refinal", "config",
           "exclude", "where")


def _say(text: str) -> None:
    print(f"arbiter: {text}", file=sys.stderr, flush=True)


def _lanes_for(job_lanes: Sequence[str] | None, here: Sequence[Lane]) -> list[Lane]:
    return [ln for ln in here if job_lanes is None or ln.name in job_lanes]


def work(url: str, *, lanes: Sequence[str] | None = None, job_id: int | None = None,
         until_done: bool = False, poll: float = 2.0, lease_seconds: float | None = None,
         stop: threading.Event | None = None) -> int:
    """Take regions until `stop` is set (or, `until_done`, until the job has none left for
    this environment); returns how many regions this worker finished. The database away for
    a while (a restart, the network) is waited for, not a reason to stop."""
    from ..records import LEASE_SECONDS, Queue, Records, fingerprint, holder_id

    stop = stop or threading.Event()
    here = usable_lanes(list(lanes) if lanes else None)
    while True:  # a fleet may start before its database server is up
        try:
            queue, records = Queue(url), Records(url)
            env_id = records.environment(fingerprint())
            break
        except StoreError as e:
            if stop.is_set() or not _unreachable(url, e):
                raise
            _say(f"the database: {one_line(str(e), url)}: trying again in {5 * poll:g} s")
            stop.wait(5 * poll)
    me = _Me(url, queue, holder_id(), env_id, here, lease_seconds or LEASE_SECONDS)
    finished = 0
    _say(f"worker {me.holder} on {masked_url(url)}: lanes "
         f"{', '.join(ln.name for ln in here)}")
    while not stop.is_set():
        try:
            todo = queue.pending(me.env_id, job_id)
            if until_done and not todo:
                return finished
            taken = me.take(todo)
            if taken is None:
                stop.wait(poll)
                continue
            finished += me.sweep(*taken)
        except StoreError as e:
            _say(f"the database: {one_line(str(e), url)}: trying again in {5 * poll:g} s")
            stop.wait(5 * poll)
    return finished


def _unreachable(url: str, e: StoreError) -> bool:
    """A database server that could not be reached (or refused the connection), as opposed to
    a database this arbiter cannot use (its schema, a SQLite file)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import InterfaceError, OperationalError

    cause = e.__cause__
    return (make_url(url).get_backend_name() != "sqlite"
            and isinstance(cause, (OperationalError, InterfaceError)))


@dataclasses.dataclass
class _Me:
    """One worker: who it is, where, and what it offers."""

    url: str
    queue: Any
    holder: str
    env_id: int
    here: list[Lane]
    lease_seconds: float

    def take(self, todo: list[Any]) -> tuple[Any, list[Lane], Any] | None:
        """The first pending region whose lease it gets, with the lanes it sweeps it with."""
        from ..records import Lease

        for p in todo:
            chosen = _lanes_for(p.options.get("lanes"), self.here)
            lease = Lease(self.url, p.region_id, self.env_id, self.holder,
                          seconds=self.lease_seconds, job_id=p.job_id)
            if chosen and lease.take() is None:
                return p, chosen, lease
        return None

    def sweep(self, p: Any, chosen: list[Lane], lease: Any) -> int:
        """Sweep the region for its job; 1 when finished here."""
        from ..records import DONE, FAILED, LeaseLost
        from ..region import parse_table

        names = [ln.name for ln in chosen]
        label = f"job {p.job_id}: region {p.table.get('name')}"

        def finish(state: str, held: Any, **what: Any) -> None:
            self.queue.finish(p, self.env_id, state=state, worker=self.holder, lanes=names,
                              guard=held.hold, **what)

        if lease.takeovers >= MAX_TAKEOVERS:
            finish(FAILED, lease, error=f"given up: its workers went silent "
                   f"{lease.takeovers} times while sweeping it")
            lease.release()
            return 0
        try:
            region = parse_table(p.table, f"job {p.job_id}")
            how = tune_settings(**{k: p.options[k] for k in OPTIONS if k in p.options})
            _say(f"{label}: sweeping ({', '.join(names)})")
            with Worker(how.timeout) as measure:
                sweep_regions(self.url, [region], chosen, how, measure, holder=self.holder,
                              job_id=p.job_id, lease_seconds=self.lease_seconds,
                              on_region=lambda _r, row, held: finish(DONE, held, row=row))
        except LeaseLost as e:
            _say(f"{label}: {one_line(str(e), self.url)}")
            return 0
        except StoreError:
            raise
        except Exception as e:  # the job asked for what this worker cannot do
            # (an ArbiterError), or a lane failed outside its isolated process: either way the
            # region fails here, once, rather than killing every worker that takes it
            why = one_line(str(e), self.url) if isinstance(e, ArbiterError) else (
                f"{type(e).__name__}: {one_line(str(e), self.url)}")
            _say(f"{label}: failed: {why}")
            if lease.take() is None:  # (let go when the sweep ended)
                finish(FAILED, lease, error=why)
                lease.release()
            return 0
        _say(f"{label}: done")
        return 1


def visible_gpus() -> list[str]:
    """The GPU ids this process may hand to its workers, one each."""
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        if os.environ.get(var) is not None:
            return [d.strip() for d in os.environ[var].split(",") if d.strip()]
    from ..records import fingerprint

    gpus = fingerprint()["gpu"]
    return [str(i) for i in range(max(len(v) for v in gpus.values()))] if gpus else []


def cpu_sets(n: int) -> list[list[int]]:
    """This process's CPUs cut into `n` disjoint contiguous sets of one size (workers do not
    time each other, and share one environment: a fingerprint counts a process's CPUs), the
    remainder left out."""
    cpus = sorted(os.sched_getaffinity(0))
    if n > len(cpus):
        raise ArbiterError(f"--workers {n}: this process may use {len(cpus)} CPUs, and every "
                           "worker needs one of its own")
    size = len(cpus) // n
    return [cpus[i * size:(i + 1) * size] for i in range(n)]


def local_workers(url: str, n: int, *, job_id: int | None = None,
                  lanes: Sequence[str] | None = None, until_done: bool = True,
                  lease_seconds: float | None = None) -> list[subprocess.Popen[bytes]]:
    """Start `n` workers here: one GPU each where there are GPUs (and GPU lanes among the
    lanes), disjoint CPU sets."""
    from ..lane import Platform

    offered = usable_lanes(list(lanes) if lanes else None)
    gpus = visible_gpus() if any(ln.platform is not Platform.CPU for ln in offered) else []
    if gpus and n > len(gpus):
        raise ArbiterError(f"--workers {n}: this machine has {len(gpus)} GPU(s), and each GPU "
                           "worker owns one (start CPU-only workers with `arbiter worker "
                           "--lanes ...`)")
    procs = []
    for i, cpus in enumerate(cpu_sets(n)):
        cmd = [sys.executable, "-m", "arbiter", "worker", "--db", url,
               "--cpus", ",".join(map(str, cpus))]
        cmd += ["--device", gpus[i]] if gpus else []
        cmd += ["--job", str(job_id)] if job_id is not None else []
        cmd += ["--until-done"] if until_done else []
        cmd += ["--lanes", ",".join(lanes)] if lanes else []
        cmd += ["--lease", f"{lease_seconds:g}"] if lease_seconds else []
        procs.append(subprocess.Popen(cmd))
    return procs


def tune_across(spec: Any, n: int, *, db: str | None = None,
                lanes: Sequence[str] | None = None, regions: Sequence[str] | None = None,
                lease_seconds: float | None = None, progress: bool = True,
                **options: Any) -> list[dict[str, Any]]:
    """`arbiter tune --workers N`: the spec as a job, swept by `n` local workers (other
    machines' workers may join); one row per region, as `tune` gives, from what this
    machine's workers' environment made of it. Interrupted, the job is cancelled."""
    from ..records import Queue, fingerprint

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ArbiterError(f"--workers must be at least 1, got {n}")
    how = tune_settings(**options)  # checked here, before any worker starts
    offered = usable_lanes(list(lanes) if lanes else None)
    named = [ln.name for ln in offered] if lanes else None
    todo = spec_regions(spec, regions)
    check_restriction(how.options.restrict, todo, offered)
    url = db or settings().db
    queue = Queue(url)
    ours = fingerprint(cpus=len(cpu_sets(n)[0])).hash  # the workers' environment
    job_id = queue.submit(todo, {"lanes": named, **options}, source="cli")
    finished = False
    try:
        procs = local_workers(url, n, job_id=job_id, lanes=lanes, lease_seconds=lease_seconds)
        seen = 0
        try:
            while any(p.poll() is None for p in procs):
                time.sleep(0.5)
                try:
                    done = queue.status(job_id)["progress"]["done"]
                except StoreError:
                    continue  # the workers wait for the database; so does this
                if progress and done != seen:
                    seen = done
                    _say(f"job {job_id}: {seen}/{len(todo)} regions done")
            finished = True
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                p.wait()
    finally:
        if not finished:
            queue.cancel(job_id)
    by_key = {r["key"]: r for r in queue.status(job_id)["regions"]}
    rows = []
    for region in todo:
        here = [f for f in by_key[region.key]["finished"] if f["fingerprint"] == ours]
        if here and here[-1]["state"] == "done":
            rows.append(dict(here[-1]["row"], region=region.name))
        else:
            why = here[-1]["error"] if here else "its workers exited before it was swept"
            rows.append(empty_row(region, budget_of(region, how.budget), "not tuned",
                                  detail=why))
    return rows
