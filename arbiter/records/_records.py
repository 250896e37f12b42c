"""Reading and writing the records in the terms the sweep speaks: results and winners.

Each result is committed as soon as it is measured, so a sweep killed outright loses at most
the trial in flight, and the next run resumes from what is here.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased

from ..lane import Config, Status
from ..measure import Measurement
from ._models import (
    SWEEP,
    CandidateModel,
    EnvironmentModel,
    LaneModel,
    MeasurementModel,
    RegionModel,
    WinnerModel,
    now,
)
from ._session import once_more_on_conflict, read_only, require_current, session_scope

__all__ = ["Records", "Result", "finite"]


def finite(x: float | None) -> float | None:
    """`x`, or None when it is not a finite number."""
    return x if x is None or math.isfinite(x) else None


@dataclass(frozen=True)
class Result:
    """One recorded measurement of one candidate, as plain values (latencies in seconds)."""

    candidate_id: int
    lane: str
    config: Config
    status: Status
    rel_error: float | None
    max_abs: float | None
    latency: float | None
    latency_low: float | None
    latency_high: float | None
    spread: float | None
    unstable: bool
    load: float | None
    budget: float
    timing_method: str = ""
    log: str = ""
    measured_at: datetime | None = None
    environment_id: int = 0
    cause: str | None = None  # the environment's part in its failure (measure._faults)
    timeout: float | None = None  # the seconds it was allowed
    memory_limit: int | None = None  # the bytes its worker could hold (None: no limit)

    def retried(self, timeout: float, memory_limit: int | None = None) -> bool:
        """Did it fail for the environment's reasons, which a run with `timeout` seconds and
        `memory_limit` bytes (None: no limit) a candidate may no longer meet (a full disk, a
        kill by someone else, a shorter timeout, a smaller memory limit)? Then a sweep
        measures it again."""
        if self.cause is not None:
            return True
        if self.status is Status.OUT_OF_MEMORY:
            return (self.memory_limit is None or memory_limit is None
                    or self.memory_limit < memory_limit)
        return (self.status is Status.TIMEOUT and self.timeout is not None
                and self.timeout < timeout)

    def fits(self, budget: float) -> bool:
        """Timed and inside `budget` (wrong_result only meant: outside the sweep's budget)."""
        return (self.status in (Status.OK, Status.WRONG_RESULT) and self.latency is not None
                and self.rel_error is not None and math.isfinite(self.rel_error)
                and self.rel_error <= budget)


def _result(c: CandidateModel, lane: str, m: MeasurementModel) -> Result:
    return Result(c.id, lane, Config.of(c.config_dict()), Status(m.status), m.rel_error,
                  m.max_abs, m.latency, m.latency_low, m.latency_high, m.spread,
                  bool(m.unstable), m.load, m.budget, m.timing_method, m.log, m.created_at,
                  c.environment_id, m.cause, m.timeout, m.memory_limit)


class Records:
    """The store at one URL, checked to be at this code's schema (created when empty and
    `create`; a query never needs to write)."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        self.url = url
        self.guard: Callable[[Session], None] | None = None
        require_current(url, create=create)
        self.read_only = read_only(url)  # (a file this process may not write: nothing recorded)

    def guarded(self, guard: Callable[[Session], None]) -> Records:
        """These records, with `guard(session)` run inside every write's transaction (a lease
        renewed: a write by a process that lost its lease is rolled back)."""
        other = copy.copy(self)
        other.guard = guard
        return other

    def ids(self, region: Any, fingerprint: Any,
            lanes: list[Any]) -> tuple[int, int, dict[str, int]]:
        def find_or_add() -> tuple[int, int, dict[str, int]]:
            with session_scope(self.url) as s:
                return (RegionModel.find_or_add(s, region).id,
                        EnvironmentModel.find_or_add(s, fingerprint.hash, dict(fingerprint)).id,
                        {ln.name: LaneModel.find_or_add(s, ln).id for ln in lanes})

        return once_more_on_conflict(find_or_add)

    def environment(self, fingerprint: Any) -> int:
        """The id of this fingerprint's environment (added when new)."""
        def find_or_add() -> int:
            with session_scope(self.url) as s:
                return EnvironmentModel.find_or_add(s, fingerprint.hash, dict(fingerprint)).id

        return once_more_on_conflict(find_or_add)

    def tuned(self, kind: str, environment_id: int) -> list[tuple[int, str, str]]:
        """Regions of `kind` with results in this environment: (id, name, canonical JSON)."""
        with session_scope(self.url) as s:
            return [tuple(r) for r in s.execute(  # type: ignore[misc]
                select(RegionModel.id, RegionModel.name, RegionModel.canonical).distinct()
                .join(CandidateModel, CandidateModel.region_id == RegionModel.id)
                .where(RegionModel.kind == kind,
                       CandidateModel.environment_id == environment_id)
                .order_by(RegionModel.id))]

    def region_id(self, key: str) -> int | None:
        with session_scope(self.url) as s:
            return s.scalar(select(RegionModel.id).where(RegionModel.key == key))

    def environment_id(self, fingerprint: str) -> int | None:
        with session_scope(self.url) as s:
            return s.scalar(select(EnvironmentModel.id)
                            .where(EnvironmentModel.fingerprint == fingerprint))

    def results(self, region_id: int, environment_id: int | None = None,
                kind: str = SWEEP) -> list[Result]:
        """Each candidate's latest measurement of `kind`, in the candidates' order (of one
        environment, or of every one)."""
        q = (select(CandidateModel, LaneModel.name, MeasurementModel)
             .join(LaneModel, LaneModel.id == CandidateModel.lane_id)
             .join(MeasurementModel, MeasurementModel.candidate_id == CandidateModel.id)
             .where(CandidateModel.region_id == region_id, MeasurementModel.kind == kind)
             .order_by(CandidateModel.id, MeasurementModel.id))
        if environment_id is not None:
            q = q.where(CandidateModel.environment_id == environment_id)
        with session_scope(self.url) as s:
            latest = {c.id: _result(c, lane, m) for c, lane, m in s.execute(q)}
        return list(latest.values())

    def record(self, region_id: int, environment_id: int, lane_id: int, config: Config,
               m: Measurement, budget: float, kind: str = SWEEP) -> Result:
        """Add the candidate (if new) and its measurement in one transaction."""
        e = m.estimate

        def write() -> Result:
            with session_scope(self.url) as s:
                if self.guard:
                    self.guard(s)
                c = s.scalars(select(CandidateModel).where(
                    CandidateModel.region_id == region_id,
                    CandidateModel.environment_id == environment_id,
                    CandidateModel.lane_id == lane_id,
                    CandidateModel.config_key == config.key)).first()
                if c is None:
                    c = CandidateModel(region_id=region_id, environment_id=environment_id,
                                       lane_id=lane_id, config_key=config.key,
                                       config=config.to_json())
                    s.add(c)
                    s.flush()
                row = MeasurementModel(
                    candidate_id=c.id, kind=kind, status=m.status.value, budget=budget,
                    rel_error=finite(m.rel_error), max_abs=finite(m.max_abs),
                    latency=None if e is None else e.latency,
                    latency_low=None if e is None else e.low,
                    latency_high=None if e is None else e.high,
                    spread=None if e is None else e.spread, median=m.median,
                    unstable=m.unstable, load=m.load, samples=json.dumps(list(m.samples)),
                    timing_method=m.timing_method, compile_seconds=m.compile_seconds,
                    log=m.log, resources=None if m.resources is None else json.dumps(m.resources),
                    cause=m.cause, timeout=m.timeout, memory_limit=m.memory_limit)
                s.add(row)
                s.flush()
                lane = s.get(LaneModel, lane_id)
                assert lane is not None
                return _result(c, lane.name, row)

        return once_more_on_conflict(write)

    def save_winner(self, region_id: int, environment_id: int, budget: float,
                    values: dict[str, Any]) -> None:
        """Declare (or declare again) the winner for (region, environment, budget)."""
        def save() -> None:
            with session_scope(self.url) as s:
                if self.guard:
                    self.guard(s)
                w = s.scalars(select(WinnerModel).where(
                    WinnerModel.region_id == region_id,
                    WinnerModel.environment_id == environment_id,
                    WinnerModel.budget == budget)).first()
                if w is None:
                    w = WinnerModel(region_id=region_id, environment_id=environment_id,
                                    budget=budget)
                    s.add(w)
                for k, v in values.items():
                    setattr(w, k, v)
                w.created_at = now()

        once_more_on_conflict(save)

    def winners(self, region_id: int, environment_id: int,
                budget: float | None = None) -> list[dict[str, Any]]:
        """The declared winners of this region here (at `budget` only, if given), oldest
        first, as plain dicts (latencies in ms)."""
        ru_c, ru_lane = aliased(CandidateModel), aliased(LaneModel)
        q = (select(WinnerModel, CandidateModel, LaneModel, ru_c, ru_lane)
             .join(CandidateModel, CandidateModel.id == WinnerModel.candidate_id)
             .join(LaneModel, LaneModel.id == CandidateModel.lane_id)
             .outerjoin(ru_c, ru_c.id == WinnerModel.runner_up_id)
             .outerjoin(ru_lane, ru_lane.id == ru_c.lane_id)
             .where(WinnerModel.region_id == region_id,
                    WinnerModel.environment_id == environment_id)
             .order_by(WinnerModel.id))
        if budget is not None:
            q = q.where(WinnerModel.budget == budget)
        with session_scope(self.url) as s:
            return [_winner_row(*row) for row in s.execute(q)]

    def foreign(self, region_id: int,
                environment_id: int | None) -> list[tuple[int, str, list[Result]]]:
        """Other environments' sweep results for this region: (id, fingerprint, results),
        newest environment first."""
        by_env: dict[int, list[Result]] = {}
        for r in self.results(region_id):
            if r.environment_id != environment_id:
                by_env.setdefault(r.environment_id, []).append(r)
        with session_scope(self.url) as s:
            envs = {i: fp for i, fp in s.execute(select(EnvironmentModel.id,
                                                        EnvironmentModel.fingerprint))}
        return [(e, envs[e], by_env[e]) for e in sorted(by_env, reverse=True)]


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _winner_row(w: WinnerModel, c: CandidateModel, lane: LaneModel,
                ru: CandidateModel | None, ru_lane: LaneModel | None) -> dict[str, Any]:
    return {
        "lane": lane.name, "config": c.config_dict(), "candidate_id": c.id,
        "budget": w.budget, "latency_ms": _ms(w.latency),
        "latency_low_ms": _ms(w.latency_low), "latency_high_ms": _ms(w.latency_high),
        "spread_ms": _ms(w.spread), "rel_error": w.rel_error, "tie": bool(w.tie),
        "verdict": w.verdict, "band": w.band, "unstable": bool(w.unstable), "load": w.load,
        "runner_up": None if ru is None or ru_lane is None else {
            "lane": ru_lane.name, "config": ru.config_dict(), "candidate_id": ru.id,
            "latency_ms": None if w.latency is None or w.margin is None
            else (w.latency + w.margin) * 1e3,
            "ratio": w.ratio, "ratio_low": w.ratio_low, "ratio_high": w.ratio_high},
        "margin_ms": _ms(w.margin), "declared_at": w.created_at,
    }
