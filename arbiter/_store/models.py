"""Record-store schema: SQLAlchemy 2 declarative models, plural snake_case tables.

Optuna's RDB storage lives in the same database and owns the names `studies`, `trials`,
`trial_*`, `version_info` and `alembic_version`, so the per-candidate table here is called
`candidates` and our Alembic version table `arbiter_alembic_version`.

One `candidates` row per (region, environment, lane, config): the unique constraint is what
guarantees a candidate is never measured twice on one machine. Its `measurements` hold the
sweep result, the interleaved finalist re-timing and re-verifications, told apart by `kind`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import (
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    bindparam,
    insert,
    select,
    update,
)
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    mapped_column,
    relationship,
    selectinload,
)

from .driver import Statements

__all__ = [
    "Base",
    "CandidateModel",
    "EnvironmentModel",
    "LaneModel",
    "MeasurementModel",
    "RegionModel",
    "SCHEMA_REVISION",
    "VERSION_TABLE",
    "WinnerModel",
]

# The Alembic head this code reads and writes; a test keeps it equal to db/versions' head.
SCHEMA_REVISION = "0003"
VERSION_TABLE = "arbiter_alembic_version"

# measurements.kind
SWEEP, FINAL, VERIFY = "sweep", "final", "verify"


def _now() -> datetime:
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
    created_at: Mapped[datetime] = mapped_column(DateTime, default=_now)

    @classmethod
    def find(cls, session: Session, key: str) -> RegionModel | None:
        return session.scalars(select(cls).where(cls.key == key)).first()

    @classmethod
    def id_for(cls, run: Statements, region: Any) -> int:
        """The region's row id, the row added if new (Core statements: a sweep's start-up)."""
        got = run.rows("find region", _FIND_REGION, cls.__table__, {"key": region.key})
        if not got:
            return _added(run, cls, {
                "key": region.key, "name": region.name, "kind": region.kind,
                "canonical": json.dumps(region.canonical(), sort_keys=True),
                "created_at": _now()})
        if region.name and got[0][1] != region.name:  # the latest label; identity is the key
            run.many("rename region", _RENAME_REGION, cls.__table__,
                     [{"row_id": got[0][0], "name": region.name}])
        return int(got[0][0])

    @classmethod
    def find_or_add(cls, session: Session, region: Any) -> RegionModel:
        return _loaded(session, cls, cls.id_for(_statements(session), region))


class EnvironmentModel(Base):
    __tablename__ = "environments"
    __table_args__ = (UniqueConstraint("fingerprint", name="uq_environments_fingerprint"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64))
    details: Mapped[str] = mapped_column(Text)  # JSON: cpu, gpu, compilers, libraries, arbiter
    created_at: Mapped[datetime] = mapped_column(DateTime, default=_now)

    @classmethod
    def find(cls, session: Session, fingerprint: str) -> EnvironmentModel | None:
        return session.scalars(select(cls).where(cls.fingerprint == fingerprint)).first()

    @classmethod
    def id_for(cls, run: Statements, fingerprint: str, details: dict) -> int:
        got = run.rows("find environment", _FIND_ENVIRONMENT, cls.__table__,
                       {"fingerprint": fingerprint})
        return int(got[0][0]) if got else _added(run, cls, {
            "fingerprint": fingerprint, "details": json.dumps(details, sort_keys=True),
            "created_at": _now()})

    @classmethod
    def find_or_add(cls, session: Session, fingerprint: str, details: dict) -> EnvironmentModel:
        return _loaded(session, cls, cls.id_for(_statements(session), fingerprint, details))


class LaneModel(Base):
    __tablename__ = "lanes"
    __table_args__ = (UniqueConstraint("name", "version", name="uq_lanes_name_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    version: Mapped[str] = mapped_column(String(64))
    platform: Mapped[str] = mapped_column(String(16))

    @classmethod
    def id_for(cls, run: Statements, lane: Any) -> int:
        version = str(lane.version)
        got = run.rows("find lane", _FIND_LANE, cls.__table__,
                       {"name": lane.name, "version": version})
        return int(got[0][0]) if got else _added(run, cls, {
            "name": lane.name, "version": version, "platform": lane.platform.value})

    @classmethod
    def find_or_add(cls, session: Session, lane: Any) -> LaneModel:
        return _loaded(session, cls, cls.id_for(_statements(session), lane))


_FIND_REGION = select(RegionModel.id, RegionModel.name).where(RegionModel.key == bindparam("key"))
_RENAME_REGION = update(RegionModel).where(RegionModel.id == bindparam("row_id"))
_FIND_ENVIRONMENT = select(EnvironmentModel.id).where(
    EnvironmentModel.fingerprint == bindparam("fingerprint"))
_FIND_LANE = select(LaneModel.id).where(LaneModel.name == bindparam("name"),
                                        LaneModel.version == bindparam("version"))


def _added(run: Statements, model: Any, values: dict[str, Any]) -> int:
    """Insert a row, every column but its id given; its id."""
    [key] = run.added(f"add {model.__tablename__}", insert(model), model.__table__, [values])
    return int(key)


def _statements(session: Session) -> Statements:
    """`Statements` in the session's transaction (SQLAlchemy's, not the driver's)."""
    conn = session.connection()
    return Statements(conn, conn.dialect, False)


def _loaded(session: Session, model: Any, row_id: int) -> Any:
    """The row `id_for` found or added, as the session's object (refreshed: Core wrote it)."""
    return session.get(model, row_id, populate_existing=True)


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
    created_at: Mapped[datetime] = mapped_column(DateTime, default=_now)

    region: Mapped[RegionModel] = relationship()
    environment: Mapped[EnvironmentModel] = relationship()
    lane: Mapped[LaneModel] = relationship()
    measurements: Mapped[list[MeasurementModel]] = relationship(
        back_populates="candidate", order_by="MeasurementModel.id")

    @classmethod
    def find(cls, session: Session, region_id: int, environment_id: int, lane_id: int,
             config_key: str) -> CandidateModel | None:
        return session.scalars(select(cls).where(
            cls.region_id == region_id, cls.environment_id == environment_id,
            cls.lane_id == lane_id, cls.config_key == config_key)).first()

    @classmethod
    def find_id(cls, session: Session, region_id: int, environment_id: int, lane_id: int,
                config_key: str) -> int | None:
        return session.scalar(select(cls.id).where(
            cls.region_id == region_id, cls.environment_id == environment_id,
            cls.lane_id == lane_id, cls.config_key == config_key))

    @classmethod
    def of_region(cls, session: Session, region_id: int,
                  environment_id: int | None = None) -> list[CandidateModel]:
        # measurements (and environments, for fingerprints) in one query each, not one per
        # candidate
        q = select(cls).where(cls.region_id == region_id).options(
            selectinload(cls.measurements), selectinload(cls.environment))
        if environment_id is not None:
            q = q.where(cls.environment_id == environment_id)
        return list(session.scalars(q.order_by(cls.id)))

    def sweep(self) -> MeasurementModel | None:
        """The search's measurement of this candidate (None: only verified here)."""
        return next((m for m in self.measurements if m.kind == SWEEP), None)

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
    median: Mapped[float | None] = mapped_column(Float, nullable=True)  # seconds
    spread: Mapped[float | None] = mapped_column(Float, nullable=True)  # IQR, seconds
    samples: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of seconds
    timing_method: Mapped[str] = mapped_column(String(64), default="")
    compile_seconds: Mapped[float] = mapped_column(Float, default=0.0)
    log: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(DateTime, default=_now)

    candidate: Mapped[CandidateModel] = relationship(back_populates="measurements")

    def sample_list(self) -> list[float]:
        return json.loads(self.samples or "[]")


class WinnerModel(Base):
    """The declared winner for (region, environment, budget), with its runner-up and margin."""

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
    median: Mapped[float | None] = mapped_column(Float, nullable=True)  # seconds, final timing
    spread: Mapped[float | None] = mapped_column(Float, nullable=True)
    rel_error: Mapped[float | None] = mapped_column(Float, nullable=True)
    margin: Mapped[float | None] = mapped_column(Float, nullable=True)  # runner-up minus winner
    tie: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime, default=_now)

    region: Mapped[RegionModel] = relationship()
    environment: Mapped[EnvironmentModel] = relationship()
    candidate: Mapped[CandidateModel] = relationship(foreign_keys=[candidate_id])
    runner_up: Mapped[CandidateModel | None] = relationship(foreign_keys=[runner_up_id])

    @classmethod
    def find(cls, session: Session, region_id: int, environment_id: int,
             budget: float) -> WinnerModel | None:
        return session.scalars(select(cls).where(
            cls.region_id == region_id, cls.environment_id == environment_id,
            cls.budget == budget)).first()

    @classmethod
    def save(cls, run: Statements, values: dict[str, Any]) -> None:
        """Insert or update the winner for `values`' (region, environment, budget): Core
        statements (a session's unit of work cost ~4 ms at each sweep's end)."""
        table = cls.__table__
        got = run.rows("find winner", _FIND_WINNER, table, {k: values[k] for k in _WINNER_KEYS})
        if not got:
            run.many("add winner", insert(cls), table, [{**values, "created_at": _now()}])
        else:
            run.many("set winner", _SET_WINNER, table, [{
                "winner_id": got[0][0], "created_at": _now(),  # (when it was declared)
                **{k: v for k, v in values.items() if k not in _WINNER_KEYS}}])

    @classmethod
    def of_region(cls, session: Session, region_id: int) -> list[WinnerModel]:
        return list(session.scalars(
            select(cls).where(cls.region_id == region_id).order_by(cls.created_at.desc())))


_WINNER_KEYS = ("region_id", "environment_id", "budget")
_FIND_WINNER = select(WinnerModel.id).where(
    *(getattr(WinnerModel, k) == bindparam(k) for k in _WINNER_KEYS))
_SET_WINNER = update(WinnerModel).where(WinnerModel.id == bindparam("winner_id"))
