"""What happened: the record store (SQLAlchemy models, sessions, migrations), the environment
fingerprint a record belongs to, and the one-sweep-per-SQLite-file lock."""

from __future__ import annotations

from ._fingerprint import Fingerprint, fingerprint
from ._jobs import CANCELLED, DONE, FAILED, OPEN, JobModel, JobRegionModel, LeaseModel, TaskModel
from ._lease import LEASE_SECONDS, Lease, LeaseLost, holder_id
from ._lock import one_sweep
from ._models import (
    FINAL,
    SCHEMA_REVISION,
    SWEEP,
    VERIFY,
    Base,
    CandidateModel,
    CeilingModel,
    EnvironmentModel,
    LaneModel,
    MeasurementModel,
    RegionModel,
    WinnerModel,
)
from ._queue import NoJob, Pending, Queue
from ._records import Records, Result, finite
from ._session import (
    BUSY_TIMEOUT_MS,
    alembic_config,
    close_engines,
    read_only,
    require_current,
    revision_of,
    session_scope,
    sqlite_path,
    upgrade,
)

__all__ = [
    "BUSY_TIMEOUT_MS", "CANCELLED", "DONE", "FAILED", "FINAL", "LEASE_SECONDS", "OPEN",
    "JobModel", "JobRegionModel", "Lease", "LeaseLost", "LeaseModel", "NoJob", "Pending", "Queue",
    "TaskModel", "holder_id", "SCHEMA_REVISION", "SWEEP", "VERIFY", "Base", "CandidateModel",
    "CeilingModel", "EnvironmentModel", "Fingerprint", "LaneModel", "MeasurementModel",
    "Records", "RegionModel", "Result", "WinnerModel", "alembic_config", "close_engines",
    "finite", "fingerprint", "one_sweep", "read_only", "require_current", "revision_of",
    "session_scope", "sqlite_path", "upgrade",
]
