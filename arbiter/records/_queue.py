"""Tune jobs in the database: submitted by `tune --workers`, `POST /v1/tune` or the API,
taken up region by region by workers of every environment, and read back as progress."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, exists, select, update

from .._errors import StoreError
from ..region import Region, region_table
from ._jobs import CANCELLED, FAILED, OPEN, JobModel, JobRegionModel, LeaseModel, TaskModel
from ._lease import changed, db_now, held
from ._models import EnvironmentModel, RegionModel
from ._session import once_more_on_conflict, require_current, session_scope

__all__ = ["NoJob", "Pending", "Queue"]


class NoJob(StoreError, LookupError):
    """No job has this id."""


@dataclass(frozen=True)
class Pending:
    """One region of one job that this environment has not finished."""

    job_id: int
    region_id: int
    table: dict[str, Any]
    options: dict[str, Any]


class Queue:
    def __init__(self, url: str, *, create: bool = True) -> None:
        self.url = url
        require_current(url, create=create)

    def submit(self, regions: list[Region], options: dict[str, Any], source: str = "") -> int:
        def add() -> int:
            with session_scope(self.url) as s:
                job = JobModel(state=OPEN, options=json.dumps(options, sort_keys=True),
                               source=source[:64])
                s.add(job)
                s.flush()
                seen: set[int] = set()
                for i, r in enumerate(regions):
                    rid = RegionModel.find_or_add(s, r).id
                    if rid not in seen:
                        seen.add(rid)
                        s.add(JobRegionModel(job_id=job.id, region_id=rid, position=i,
                                             table=json.dumps(region_table(r), sort_keys=True)))
                return job.id

        return once_more_on_conflict(add)

    def pending(self, environment_id: int, job_id: int | None = None) -> list[Pending]:
        done = exists().where(TaskModel.job_id == JobRegionModel.job_id,
                              TaskModel.region_id == JobRegionModel.region_id,
                              TaskModel.environment_id == environment_id)
        q = (select(JobRegionModel, JobModel.options)
             .join(JobModel, JobModel.id == JobRegionModel.job_id)
             .where(JobModel.state == OPEN, ~done)
             .order_by(JobModel.id, JobRegionModel.position))
        if job_id is not None:
            q = q.where(JobModel.id == job_id)
        with session_scope(self.url) as s:
            return [Pending(jr.job_id, jr.region_id, json.loads(jr.table), json.loads(opts))
                    for jr, opts in s.execute(q)]

    def finish(self, p: Pending, environment_id: int, *, state: str, worker: str,
               lanes: list[str], row: dict[str, Any] | None = None, error: str = "",
               guard: Any = None) -> None:
        """Record what this environment made of the region (inside the lease's guard: a
        worker that lost the region does not finish it)."""
        def write() -> None:
            with session_scope(self.url) as s:
                if guard is not None:
                    guard(s)
                if s.scalar(select(TaskModel.id).where(
                        TaskModel.job_id == p.job_id, TaskModel.region_id == p.region_id,
                        TaskModel.environment_id == environment_id)) is None:
                    s.add(TaskModel(job_id=p.job_id, region_id=p.region_id,
                                    environment_id=environment_id, state=state,
                                    worker=worker[:255], lanes=json.dumps(lanes),
                                    row=json.dumps(row or {}, default=str), error=error))

        once_more_on_conflict(write)

    def cancel(self, job_id: int) -> None:
        with session_scope(self.url) as s:
            if not changed(s, update(JobModel).where(JobModel.id == job_id)
                           .values(state=CANCELLED)):
                raise NoJob(f"no job {job_id}")

    def status(self, job_id: int) -> dict[str, Any]:
        """The job, its regions and what every environment made of each; `state` is queued
        (nothing taken yet), running, done (every region finished by some environment: final,
        though another environment may sweep them too, shown under `running`) or cancelled.
        A lease whose holder went silent is not `running`."""
        with session_scope(self.url) as s:
            job = s.get(JobModel, job_id)
            if job is None:
                raise NoJob(f"no job {job_id}")
            t = db_now(s)
            regions = s.execute(
                select(JobRegionModel, RegionModel.key)
                .join(RegionModel, RegionModel.id == JobRegionModel.region_id)
                .where(JobRegionModel.job_id == job_id).order_by(JobRegionModel.position)).all()
            tasks = s.execute(
                select(TaskModel, EnvironmentModel.fingerprint)
                .join(EnvironmentModel, EnvironmentModel.id == TaskModel.environment_id)
                .where(TaskModel.job_id == job_id).order_by(TaskModel.id)).all()
            leases = s.execute(
                select(LeaseModel, EnvironmentModel.fingerprint)
                .join(EnvironmentModel, EnvironmentModel.id == LeaseModel.environment_id)
                .where(and_(LeaseModel.job_id == job_id,
                            LeaseModel.holder.is_not(None)))).all()
            rows = []
            for jr, key in regions:
                table = json.loads(jr.table)
                rows.append({
                    "name": table.get("name"), "key": key,
                    "finished": [{"fingerprint": fp, "state": tk.state, "worker": tk.worker,
                                  "lanes": json.loads(tk.lanes), "error": tk.error or None,
                                  "finished_at": tk.finished_at.isoformat() + "Z",
                                  "row": json.loads(tk.row)}
                                 for tk, fp in tasks if tk.region_id == jr.region_id],
                    "running": [{"fingerprint": fp, "worker": ls.holder,
                                 "silent_s": round((t - ls.heartbeat_at).total_seconds(), 1)
                                 if ls.heartbeat_at else None}
                                for ls, fp in leases
                                if ls.region_id == jr.region_id and held(ls, t)]})
            done = sum(bool(r["finished"]) for r in rows)
            failed = sum(any(f["state"] == FAILED for f in r["finished"]) for r in rows)
            running = sum(bool(r["running"]) for r in rows)
            state = (CANCELLED if job.state == CANCELLED else "done" if done == len(rows)
                     else "queued" if not tasks and not running else "running")
            return {"id": job.id, "state": state, "source": job.source,
                    "created_at": job.created_at.isoformat() + "Z",
                    "options": job.options_dict(),
                    "progress": {"regions": len(rows), "done": done, "failed": failed,
                                 "running": running},
                    "regions": rows}

    def jobs(self) -> list[int]:
        with session_scope(self.url) as s:
            return list(s.scalars(select(JobModel.id).order_by(JobModel.id)))


