"""The recorded sweeps, one per region and environment (`arbiter export optuna`, `replay`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Swept", "swept"]


@dataclass(frozen=True)
class Swept:
    """One region's sweep in one environment, as recorded."""

    region: Any
    region_id: int
    environment_id: int
    fingerprint: str
    details: str
    budget: float


def swept(url: str) -> Iterator[tuple[Swept, list[Any]]]:
    """Every (region, environment) with recorded candidates, and their sweep results; the
    budget is that of its latest declared winner, else the region's own."""
    from sqlalchemy import select

    from ..check import budget_of
    from ..records import CandidateModel, EnvironmentModel, Records, RegionModel, session_scope
    from ..region import region_from_canonical

    records = Records(url, create=False)
    with session_scope(url) as s:
        rows = s.execute(select(RegionModel.id, RegionModel.name, RegionModel.canonical,
                                EnvironmentModel.id, EnvironmentModel.fingerprint,
                                EnvironmentModel.details)
                         .join(CandidateModel, CandidateModel.region_id == RegionModel.id)
                         .join(EnvironmentModel,
                               EnvironmentModel.id == CandidateModel.environment_id)
                         .distinct().order_by(RegionModel.id, EnvironmentModel.id)).all()
    for region_id, name, canonical, env_id, fp, details in rows:
        region = region_from_canonical(canonical).with_name(name)
        declared = records.winners(region_id, env_id)
        budget = declared[-1]["budget"] if declared else budget_of(region)
        yield (Swept(region, region_id, env_id, fp, details, budget),
               records.results(region_id, env_id))
