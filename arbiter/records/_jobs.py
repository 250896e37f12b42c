"""The work queue's schema: tune jobs, their regions, the lease a worker holds on a region
while it sweeps it, and what each environment's worker made of each region of a job.

A lease is one row per (region, environment): whoever holds it (and keeps its heartbeat fresh)
is the only process measuring that region's candidates there. Heartbeats are written in the
database's own clock, so workers on machines whose clocks disagree still agree on expiry.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from ._models import Base, now

__all__ = ["CANCELLED", "DONE", "FAILED", "OPEN", "JobModel", "JobRegionModel", "LeaseModel",
           "TaskModel"]

OPEN, CANCELLED = "open", "cancelled"  # jobs.state
DONE, FAILED = "done", "failed"  # tasks.state


class JobModel(Base):
    """A tune request: regions and the options of `arbiter tune`, taken up by workers."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    state: Mapped[str] = mapped_column(String(16), default=OPEN)
    options: Mapped[str] = mapped_column(Text, default="{}")  # JSON: trials, lanes, budget, ...
    source: Mapped[str] = mapped_column(String(64), default="")  # cli, http, ...
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)

    def options_dict(self) -> dict[str, Any]:
        return json.loads(self.options or "{}")


class JobRegionModel(Base):
    __tablename__ = "job_regions"
    __table_args__ = (UniqueConstraint("job_id", "region_id", name="uq_job_regions_identity"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer, default=0)
    table: Mapped[str] = mapped_column(Text)  # JSON: the region's spec table (name, budget)


class TaskModel(Base):
    """One region of one job, finished (or given up) by a worker of one environment."""

    __tablename__ = "tasks"
    __table_args__ = (UniqueConstraint("job_id", "region_id", "environment_id",
                                       name="uq_tasks_identity"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(String(16))
    worker: Mapped[str] = mapped_column(String(255), default="")
    lanes: Mapped[str] = mapped_column(Text, default="[]")  # JSON: the lanes it was swept with
    row: Mapped[str] = mapped_column(Text, default="{}")  # JSON: the region's `tune` row
    error: Mapped[str] = mapped_column(Text, default="")
    finished_at: Mapped[datetime] = mapped_column(DateTime, default=now)


class LeaseModel(Base):
    __tablename__ = "leases"
    __table_args__ = (UniqueConstraint("region_id", "environment_id",
                                       name="uq_leases_identity"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id", ondelete="CASCADE"))
    holder: Mapped[str | None] = mapped_column(String(255), nullable=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"),
                                               nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    taken_at: Mapped[datetime | None] = mapped_column(DateTime, nullable=True)
    seconds: Mapped[float] = mapped_column(Float, default=60.0)  # silence that ends it
    takeovers: Mapped[int] = mapped_column(Integer, default=0)  # from holders that went silent
