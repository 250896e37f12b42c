"""Measured machine ceilings per environment: copy bandwidth and matmul rate.

The roofline report places each winner against what this machine was measured to do, not
against a datasheet; one row per (environment, name), measured once and kept.
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import DateTime, Float, ForeignKey, Integer, String, UniqueConstraint, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from .models import Base

__all__ = ["CeilingModel"]


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


class CeilingModel(Base):
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
    measured_at: Mapped[datetime] = mapped_column(DateTime, default=_now)

    @classmethod
    def of_environment(cls, session: Session, environment_id: int) -> list[CeilingModel]:
        return list(
            session.scalars(
                select(cls).where(cls.environment_id == environment_id).order_by(cls.name)
            )
        )

    @classmethod
    def put(
        cls, session: Session, environment_id: int, name: str, value: float, unit: str, method: str
    ) -> CeilingModel:
        row = session.scalars(
            select(cls).where(cls.environment_id == environment_id, cls.name == name)
        ).first()
        if row is None:
            row = cls(environment_id=environment_id, name=name)
            session.add(row)
        row.value, row.unit, row.method, row.measured_at = value, unit, method, _now()
        session.flush()
        return row
