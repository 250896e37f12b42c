"""Reading and writing the record store in the terms the search speaks: results, winners.

Each result is committed before the next candidate is timed (mostly while it builds; see
`_search`), so a sweep killed outright loses at most the trial in flight and one just
finished. `choose` is the one place a winner is decided, from recorded numbers only, so a
different budget at query time needs no new measurement.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, insert, select

from ._store import (
    CandidateModel,
    EnvironmentModel,
    LaneModel,
    MeasurementModel,
    RegionModel,
    WinnerModel,
    connection_scope,
    once_more_on_conflict,
    require_current,
    session_scope,
    statements_scope,
)
from ._store.models import FINAL, SWEEP, VERIFY, _now
from ._values import Config, Measurement, Status

__all__ = ["Choice", "Records", "Result", "ceiling_of", "choose", "finite"]

# Candidates are timed when their error is inside this ceiling, not only inside the sweep's
# budget, so a looser budget asked later can be answered from the records.
CEILING_FACTOR = 10.0
CEILING_FLOOR = 1e-2


def ceiling_of(budget: float) -> float:
    return max(budget * CEILING_FACTOR, CEILING_FLOOR)


@dataclass(frozen=True)
class Result:
    """One recorded measurement of one candidate, as plain values."""

    candidate_id: int
    lane: str
    config: Config
    status: Status
    rel_error: float | None
    max_abs: float | None
    median: float | None  # seconds
    spread: float | None
    budget: float
    timing_method: str = ""
    log: str = ""

    def fits(self, budget: float) -> bool:
        """Timed and inside `budget` (wrong_result only meant: outside the sweep's budget)."""
        return (self.status in (Status.OK, Status.WRONG_RESULT) and self.median is not None
                and self.rel_error is not None and math.isfinite(self.rel_error)
                and self.rel_error <= budget)


@dataclass(frozen=True)
class Choice:
    winner: Result
    runner_up: Result | None
    tie: bool
    margin: float | None  # runner-up median minus winner median, seconds


def choose(results: list[Result], budget: float) -> Choice | None:
    """Fastest result inside `budget`; when the runner-up is within the measured spread the
    candidates are tied and the lowest error among the tied ones wins."""
    fit = sorted((r for r in results if r.fits(budget)), key=lambda r: (r.median, r.rel_error))
    if not fit:
        return None
    best = fit[0]
    if len(fit) == 1:
        return Choice(best, None, False, None)

    def within(r: Result) -> bool:
        noise = max(best.spread or 0.0, r.spread or 0.0)
        return r.median - best.median <= noise  # type: ignore[operator]

    tied = [r for r in fit if within(r)]
    if len(tied) == 1:
        return Choice(best, fit[1], False, fit[1].median - best.median)  # type: ignore[operator]
    winner = min(tied, key=lambda r: (r.rel_error, r.median))
    runner_up = next(r for r in tied if r is not winner)
    return Choice(winner, runner_up, True, runner_up.median - winner.median)  # type: ignore[operator]


# built once: building a statement with its values costs more than running it
_CANDIDATE_KEYS = ("region_id", "environment_id", "lane_id", "config_key")
_FIND_CANDIDATE = select(CandidateModel.id).where(
    *(getattr(CandidateModel, k) == bindparam(k) for k in _CANDIDATE_KEYS))


_ADD_MEASUREMENT = insert(MeasurementModel)
_RESULTS = select(
    CandidateModel.id, LaneModel.name, CandidateModel.config, MeasurementModel.status,
    MeasurementModel.rel_error, MeasurementModel.max_abs, MeasurementModel.median,
    MeasurementModel.spread, MeasurementModel.budget, MeasurementModel.timing_method,
    MeasurementModel.log,
).join(LaneModel, LaneModel.id == CandidateModel.lane_id).join(
    MeasurementModel, MeasurementModel.candidate_id == CandidateModel.id).where(
    CandidateModel.region_id == bindparam("region_id"),
    CandidateModel.environment_id == bindparam("environment_id"),
    MeasurementModel.kind == bindparam("kind"),
).order_by(CandidateModel.id, MeasurementModel.id)


@functools.cache
def _add_candidate(dialect: str, returning: bool) -> Any:
    """The candidate's insert, returning its id, or nothing when the row is there already;
    None where the database has no such statement (the candidate is looked up first)."""
    if not returning:  # SQLite before 3.35
        return None
    if dialect == "sqlite":
        from sqlalchemy.dialects import sqlite as kind
    elif dialect == "postgresql":
        from sqlalchemy.dialects import postgresql as kind  # type: ignore[no-redef]
    else:
        return None
    return kind.insert(CandidateModel).on_conflict_do_nothing(
        index_elements=list(_CANDIDATE_KEYS)).returning(CandidateModel.id)


def _result(c: CandidateModel, m: MeasurementModel) -> Result:
    return Result(c.id, c.lane.name, Config.of(c.config_dict()), Status(m.status), m.rel_error,
                  m.max_abs, m.median, m.spread, m.budget, m.timing_method, m.log)


class Records:
    """The store at one URL, checked to be at this code's schema (created when empty)."""

    def __init__(self, url: str, *, create: bool = True) -> None:
        self.url = url
        require_current(url, create=create)
        self._lane_names: dict[int, str] = {}

    def ids(
        self, region: Any, fingerprint: Any, lanes: list[Any]
    ) -> tuple[int, int, dict[str, int]]:
        def find_or_add() -> tuple[int, int, dict[str, int]]:
            # Core statements, not a session's flushes: this is in every sweep's start-up
            with statements_scope(self.url) as run:
                return (RegionModel.id_for(run, region),
                        EnvironmentModel.id_for(run, fingerprint.hash, dict(fingerprint)),
                        {ln.name: LaneModel.id_for(run, ln) for ln in lanes})

        region_id, env_id, lane_ids = once_more_on_conflict(find_or_add)
        self._lane_names.update((i, n) for n, i in lane_ids.items())
        return region_id, env_id, lane_ids

    def results(self, region_id: int, environment_id: int, kind: str = SWEEP) -> list[Result]:
        """Each candidate's latest measurement of `kind`, in the candidates' order."""
        with statements_scope(self.url) as run:
            rows = run.rows("results", _RESULTS, CandidateModel.__table__, {
                "region_id": region_id, "environment_id": environment_id, "kind": kind})
        latest = {row[0]: row for row in rows}  # ordered by candidate, then measurement
        return [Result(i, lane, Config.of(json.loads(config)), Status(status), *numbers)
                for i, lane, config, status, *numbers in latest.values()]

    def record(self, region_id: int, environment_id: int, lane_id: int, config: Config,
               m: Measurement, budget: float, kind: str = SWEEP) -> Result:
        """Add the candidate (if new) and its measurement in one transaction; committed on
        return. The Result is built from what was written, without reading it back. Core
        statements, not a session: this is on the path between trials."""
        rel_error, max_abs = finite(m.rel_error), finite(m.max_abs)
        row = {"kind": kind, "status": m.status.value, "budget": budget,
               "rel_error": rel_error, "max_abs": max_abs,
               "median": m.median, "spread": m.spread, "samples": json.dumps(list(m.samples)),
               "timing_method": m.timing_method, "compile_seconds": m.compile_seconds,
               "log": m.log}
        ident = {"region_id": region_id, "environment_id": environment_id, "lane_id": lane_id,
                 "config_key": config.key}

        def write() -> int:
            # on SQLite, on the driver's cursor: SQLAlchemy's execution layer and connection
            # objects took ~3/4 of a record's time
            with statements_scope(self.url) as run:
                now = _now()
                candidate = {**ident, "config": config.to_json(), "created_at": now}
                candidates = CandidateModel.__table__
                add = _add_candidate(run.dialect.name, run.dialect.insert_returning)
                got: list[tuple[Any, ...]] = []
                if add is not None:  # a new candidate, as most are: one statement
                    got = run.rows("add candidate", add, candidates, candidate)
                if not got:
                    got = run.rows("find candidate", _FIND_CANDIDATE, candidates, ident)
                if not got:
                    got = [tuple(run.added("add candidate plainly", insert(CandidateModel),
                                           candidates, [candidate]))]
                run.many("add measurement", _ADD_MEASUREMENT, MeasurementModel.__table__,
                         [{**row, "candidate_id": got[0][0], "created_at": now}])
                return int(got[0][0])

        candidate_id = once_more_on_conflict(write)
        return Result(candidate_id, self._lane_name(lane_id), config, m.status, rel_error,
                      max_abs, m.median, m.spread, budget, m.timing_method, m.log)

    def _lane_name(self, lane_id: int) -> str:
        lane = self._lane_names.get(lane_id)
        if lane is None:  # an id this object did not hand out (`ids`)
            with connection_scope(self.url) as conn:
                lane = self._lane_names[lane_id] = conn.execute(
                    select(LaneModel.name).where(LaneModel.id == lane_id)).scalar_one()
        return lane

    def save_winner(self, region_id: int, environment_id: int, budget: float,
                    choice: Choice) -> None:
        w = choice.winner
        values = {"region_id": region_id, "environment_id": environment_id, "budget": budget,
                  "candidate_id": w.candidate_id,
                  "runner_up_id": choice.runner_up.candidate_id if choice.runner_up else None,
                  "median": w.median, "spread": w.spread, "rel_error": w.rel_error,
                  "margin": choice.margin, "tie": choice.tie}

        def save() -> None:
            with statements_scope(self.url) as run:
                WinnerModel.save(run, values)

        # two sweeps of one region ending at once: the second finds the first one's row
        once_more_on_conflict(save)

    def winner(self, region_id: int, environment_id: int, budget: float) -> dict | None:
        with session_scope(self.url) as s:
            w = WinnerModel.find(s, region_id, environment_id, budget)
            return None if w is None else _winner_row(w)

    def region_id(self, key: str) -> int | None:
        with session_scope(self.url) as s:
            r = RegionModel.find(s, key)
            return None if r is None else r.id

    def environment_id(self, fingerprint: str) -> int | None:
        with session_scope(self.url) as s:
            e = EnvironmentModel.find(s, fingerprint)
            return None if e is None else e.id

    def foreign(self, region_id: int, environment_id: int | None,
                ) -> list[tuple[int, str, list[Result]]]:
        """Other environments' sweep results for this region, with each one's id and
        fingerprint, newest environment first."""
        with session_scope(self.url) as s:
            envs: dict[int, tuple[int, str, list[Result]]] = {}
            for c in CandidateModel.of_region(s, region_id):
                if c.environment_id == environment_id:
                    continue
                m = c.sweep()
                if m is not None:
                    envs.setdefault(c.environment_id, (
                        c.environment_id, c.environment.fingerprint, []))[2].append(_result(c, m))
            return [envs[k] for k in sorted(envs, reverse=True)]

    def measured_since(self, region_id: int, environment_id: int, when: Any) -> set[int]:
        """The candidates with a sweep measurement newer than `when`."""
        with session_scope(self.url) as s:
            return set(s.scalars(select(MeasurementModel.candidate_id).join(
                CandidateModel, CandidateModel.id == MeasurementModel.candidate_id).where(
                CandidateModel.region_id == region_id,
                CandidateModel.environment_id == environment_id,
                MeasurementModel.kind == SWEEP, MeasurementModel.created_at > when)))

    def winners(self, region_id: int, environment_id: int) -> list[tuple[float, dict]]:
        """Every declared winner of this region here, with the budget it was declared for."""
        with session_scope(self.url) as s:
            return [(w.budget, _winner_row(w)) for w in s.scalars(select(WinnerModel).where(
                WinnerModel.region_id == region_id,
                WinnerModel.environment_id == environment_id).order_by(WinnerModel.id))]


def finite(x: float | None) -> float | None:
    """`x`, or None when it is not a finite number."""
    return x if x is None or math.isfinite(x) else None


def _winner_row(w: WinnerModel) -> dict:
    c = w.candidate
    return {
        "lane": c.lane.name, "config": c.config_dict(), "candidate_id": c.id,
        "latency_ms": None if w.median is None else w.median * 1e3,
        "spread_ms": None if w.spread is None else w.spread * 1e3,
        "rel_error": w.rel_error, "tie": w.tie,
        "runner_up": None if w.runner_up is None else {
            "lane": w.runner_up.lane.name, "config": w.runner_up.config_dict()},
        "margin_ms": None if w.margin is None else w.margin * 1e3,
        "declared_at": w.created_at,
    }


__all__ += ["FINAL", "SWEEP", "VERIFY"]
