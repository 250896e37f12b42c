"""Record-store schema: SQLAlchemy 2 declarative models, plural snake_case tables.

Optuna's RDB storage lives in the same database and owns the names `studies`, `trials`,
`trial_*`, `version_info` and `alembic_version`, so the per-candidate table here is called
`candidates` and our Alembic version table `arbiter_alembic_version`.

One `candidates` row per (region, environment, lane, config): the unique constraint is what
guarantees a candidate is never measured twice on one machine. Its `measurements` hold the
sweep result, the finalists' interleaved re-timing and re-verifications, told apart by `kind`.
Latencies are seconds: `latency` is the decision's estimator (`arbiter.measure`), `median`
the plain median of the samples.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

__all__ = ["FINAL", "SCHEMA_REVISION", "SWEEP", "VERIFY", "VERSION_TABLE", "Base",
           "CandidateModel", "CeilingModel", "EnvironmentModel", "LaneModel",
           "MeasurementModel", "RegionModel", "WinnerModel", "now"]

# The Alembic head this code reads and writes; a test keeps it equal to db/versions' head.
SCHEMA_REVISION = "0008"
VERSION_TABLE = "arbiter_alembic_version"

# measurements.kind
SWEEP, FINAL, VERIFY = "sweep", "final", "verify"


def now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class RegionModel(Base):
    __tablename__ = "regions"
    __table_args__ = (UniqueConstraint("key", name="uq_regions_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(64))
    name: Mapped[str] = mapped_column(String(255), default="")
    kind: Mapped[str] = mapped_column(String(32))
    canonical: Mapped[str] = mapped_column(Text)  # JSON of Region.canonical()
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)

    @classmethod
    def find_or_add(cls, session: Session, region: Any) -> RegionModel:
        row = session.scalars(select(cls).where(cls.key == region.key)).first()
        if row is None:
            row = cls(key=region.key, name=region.name, kind=region.kind,
                      canonical=json.dumps(region.canonical(), sort_keys=True))
            session.add(row)
        elif region.name and row.name != region.name:  # the latest label; identity is the key
            row.name = region.name
        session.flush()
        return row


class EnvironmentModel(Base):
    __tablename__ = "environments"
    __table_args__ = (UniqueConstraint("fingerprint", name="uq_environments_fingerprint"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    details: Mapped[str] = mapped_column(Text)  # JSON: cpu, gpu, compilers, libraries, arbiter
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)

    @classmethod
    def find(cls, session: Session, fingerprint: str) -> EnvironmentModel | None:
        return session.scalars(select(cls).where(cls.fingerprint == fingerprint)).first()

    @classmethod
    def find_or_add(cls, session: Session, fingerprint: str, details: dict) -> EnvironmentModel:
        row = cls.find(session, fingerprint)
        if row is None:
            row = cls(fingerprint=fingerprint, details=json.dumps(details, sort_keys=True))
            session.add(row)
            session.flush()
        return row


class LaneModel(Base):
    __tablename__ = "lanes"
    __table_args__ = (UniqueConstraint("name", "version", name="uq_lanes_name_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    version: Mapped[str] = mapped_column(String(64))
    platform: Mapped[str] = mapped_column(String(16))

    @classmethod
    def find_or_add(cls, session: Session, lane: Any) -> LaneModel:
        version = str(lane.version)
        row = session.scalars(select(cls).where(cls.name == lane.name,
                                                cls.version == version)).first()
        if row is None:
            row = cls(name=lane.name, version=version, platform=lane.platform.value)
            session.add(row)
            session.flush()
        return row


class CandidateModel(Base):
    """One (region, environment, lane, config): measured at most once per machine."""

    __tablename__ = "candidates"
    __table_args__ = (
        UniqueConstraint("region_id", "environment_id", "lane_id", "config_key",
                         name="uq_candidates_identity"),
        Index("ix_candidates_region_environment", "region_id", "environment_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id", ondelete="CASCADE"))
    lane_id: Mapped[int] = mapped_column(ForeignKey("lanes.id", ondelete="CASCADE"))
    config_key: Mapped[str] = mapped_column(String(32))
    config: Mapped[str] = mapped_column(Text)  # Config.to_json()
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)

    region: Mapped[RegionModel] = relationship()
    environment: Mapped[EnvironmentModel] = relationship()
    lane: Mapped[LaneModel] = relationship()

    def config_dict(self) -> dict[str, Any]:
        return json.loads(self.config)


class MeasurementModel(Base):
    __tablename__ = "measurements"
    __table_args__ = (Index("ix_measurements_candidate", "candidate_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16), default=SWEEP, server_default=SWEEP)
    status: Mapped[str] = mapped_column(String(32))
    budget: Mapped[float] = mapped_column(Float)  # the budget the status was judged against
    rel_error: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_abs: Mapped[float | None] = mapped_column(Float, nullable=True)
    latency: Mapped[float | None] = mapped_column(Float, nullable=True)
    latency_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    latency_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    median: Mapped[float | None] = mapped_column(Float, nullable=True)
    spread: Mapped[float | None] = mapped_column(Float, nullable=True)  # IQR of round values
    unstable: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    load: Mapped[float | None] = mapped_column(Float, nullable=True)  # others' CPU share
    samples: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of seconds
    timing_method: Mapped[str] = mapped_column(String(64), default="")
    compile_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    # JSON: what the build uses on its target (Artifact.resources), where the lane reads it
    resources: Mapped[str | None] = mapped_column(Text, nullable=True)
    # a failure the environment caused (an errno or signal name: measure._faults), and the
    # seconds the candidate was allowed: either makes a later sweep measure it again
    cause: Mapped[str | None] = mapped_column(String(32), nullable=True)
    timeout: Mapped[float | None] = mapped_column(Float, nullable=True)
    # bytes the worker could hold (ARBITER_WORKER_MEMORY); None: no limit. An out_of_memory
    # is measured again by a sweep that allows more
    memory_limit: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    log: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)

    candidate: Mapped[CandidateModel] = relationship()

    def sample_list(self) -> list[float]:
        return json.loads(self.samples or "[]")


class WinnerModel(Base):
    """The declared winner for (region, environment, budget): its latency from the finalists'
    interleaved rounds, and how its runner-up was told apart."""

    __tablename__ = "winners"
    __table_args__ = (
        UniqueConstraint("region_id", "environment_id", "budget", name="uq_winners_identity"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    region_id: Mapped[int] = mapped_column(ForeignKey("regions.id", ondelete="CASCADE"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id", ondelete="CASCADE"))
    budget: Mapped[float] = mapped_column(Float)
    candidate_id: Mapped[int] = mapped_column(ForeignKey("candidates.id", ondelete="CASCADE"))
    runner_up_id: Mapped[int | None] = mapped_column(
        ForeignKey("candidates.id", ondelete="SET NULL"), nullable=True)
    latency: Mapped[float | None] = mapped_column(Float, nullable=True)
    latency_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    latency_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    spread: Mapped[float | None] = mapped_column(Float, nullable=True)
    rel_error: Mapped[float | None] = mapped_column(Float, nullable=True)
    margin: Mapped[float | None] = mapped_column(Float, nullable=True)  # runner-up minus winner
    ratio: Mapped[float | None] = mapped_column(Float, nullable=True)  # runner-up / winner
    ratio_low: Mapped[float | None] = mapped_column(Float, nullable=True)
    ratio_high: Mapped[float | None] = mapped_column(Float, nullable=True)
    band: Mapped[float | None] = mapped_column(Float, nullable=True)  # of a tie, when decided
    verdict: Mapped[str | None] = mapped_column(String(16), nullable=True)  # faster|tie|...
    tie: Mapped[bool] = mapped_column(Boolean, default=False)
    unstable: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    load: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=now)  # when declared

    candidate: Mapped[CandidateModel] = relationship(foreign_keys=[candidate_id])
    runner_up: Mapped[CandidateModel | None] = relationship(foreign_keys=[runner_up_id])



class CeilingModel(Base):
    """A measured machine ceiling (copy bandwidth, matmul rate) per environment, for the
    roofline report: what this machine was measured to do, not a datasheet."""

    __tablename__ = "ceilings"
    __table_args__ = (
        UniqueConstraint("environment_id", "name", name="uq_ceilings_environment_name"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))  # copy_bandwidth, matmul_f32, gpu_...
    value: Mapped[float] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(16))  # B/s, FLOP/s
    method: Mapped[str] = mapped_column(String(255), default="")
    measured_at: Mapped[datetime] = mapped_column(DateTime, default=now)

    @classmethod
    def put(cls, session: Session, environment_id: int, name: str, value: float, unit: str,
            method: str) -> CeilingModel:
        row = session.scalars(select(cls).where(cls.environment_id == environment_id,
                                                cls.name == name)).first()
        if row is None:
            row = cls(environment_id=environment_id, name=name)
            session.add(row)
        row.value, row.unit, row.method, row.measured_at = value, unit, method, now()
        session.flush()
        return row
