"""The record store: SQLAlchemy models, one session helper, schema checks and migrations."""

from __future__ import annotations

from .ceilings import CeilingModel as CeilingModel
from .models import (
    SCHEMA_REVISION,
    Base,
    CandidateModel,
    EnvironmentModel,
    LaneModel,
    MeasurementModel,
    RegionModel,
    WinnerModel,
)
from .session import (
    connection_scope,
    engine_for,
    once_more_on_conflict,
    require_current,
    revision_of,
    session_scope,
    statements_scope,
    upgrade,
)

__all__ = [
    "SCHEMA_REVISION",
    "Base",
    "CandidateModel",
    "EnvironmentModel",
    "LaneModel",
    "MeasurementModel",
    "RegionModel",
    "WinnerModel",
    "connection_scope",
    "engine_for",
    "once_more_on_conflict",
    "require_current",
    "revision_of",
    "session_scope",
    "statements_scope",
    "upgrade",
]
