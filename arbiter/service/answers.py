"""What `arbiter serve` answers from the records, read-only: the tuned regions and the best
lane per region, exactly as `arbiter best --json` gives it (never re-verified here: the
server runs no kernel). Answers are kept until the records change."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

from sqlalchemy import func, select

from .._errors import ArbiterError, StoreError, one_line
from ..api import answer, nearest
from ..check import budget_of, checked_budget
from ..records import (
    SWEEP,
    CandidateModel,
    EnvironmentModel,
    MeasurementModel,
    Records,
    RegionModel,
    WinnerModel,
    session_scope,
)
from ..region import Region, parse_table, region_from_canonical

__all__ = ["Answers", "Problem", "parse_budget", "parse_fingerprint", "parse_region"]

FINGERPRINT = re.compile(r"[0-9a-f]{16}")

KEPT_BYTES = 64 << 20  # answers kept between changes of the records, at most
MAX_AGE = 60.0  # seconds an answer is kept at most, whatever the records say


class Problem(Exception):
    """A request the server cannot answer: an HTTP status and one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_budget(text: Any) -> float | None:
    if text is None or text == "":
        return None
    try:
        return checked_budget(float(text))
    except (ValueError, TypeError, ArbiterError):
        shown = text if len(str(text)) <= 40 else str(text)[:40] + "..."
        raise Problem(400, f"budget must be a positive number, got {shown!r}") from None


def parse_fingerprint(text: Any) -> str | None:
    if text is None or text == "":
        return None
    if not isinstance(text, str) or not FINGERPRINT.fullmatch(text):
        raise Problem(400, "fingerprint must be the 16 hex digits GET /v1/regions lists")
    return text


def parse_region(table: Any) -> tuple[Region, bool]:
    """A region from its spec table; True when the table named none."""
    unnamed = isinstance(table, dict) and "name" not in table
    try:
        return parse_table({**table, "name": "request"} if unnamed else table, "request"), unnamed
    except ArbiterError as e:
        raise Problem(400, one_line(str(e))) from None


class Answers:
    """The answers, kept until the records change (found by `refresh`, which the server calls
    twice a second) and for `MAX_AGE` seconds at most (a change the token cannot see: a
    region renamed, a commit whose ids arrived out of order)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.records = Records(url)
        self.cache: dict[Any, tuple[float, bytes]] = {}
        self.size = 0
        self.generation = 0  # one more at every change: an answer computed before is not kept
        self.hits = self.misses = 0
        self._token: Any = None
        self._lock = threading.Lock()

    def token(self) -> tuple:
        """Changes whenever a measurement, a winner, a region or an environment is added or a
        winner declared again."""
        def top(col: Any) -> Any:
            return select(func.max(col)).scalar_subquery()

        with session_scope(self.url) as s:
            return tuple(s.execute(select(
                top(MeasurementModel.id), top(WinnerModel.created_at),
                select(func.count(WinnerModel.id)).scalar_subquery(), top(RegionModel.id),
                top(EnvironmentModel.id))).one())

    def refresh(self) -> bool:
        """Forget every kept answer when the records changed; True when they did."""
        token = self.token()
        with self._lock:
            if token == self._token:
                return False
            self._token = token
            self.generation += 1
            self.cache.clear()
            self.size = 0
            return True

    def kept(self, key: Any) -> bytes | None:
        found = self.cache.get(key)
        if found is None or time.monotonic() - found[0] > MAX_AGE:
            self.misses += 1
            return None
        self.hits += 1
        return found[1]

    def keep(self, key: Any, body: bytes, generation: int) -> bytes:
        """Keep `body`, computed when the records were at `generation`, if they still are."""
        with self._lock:
            if generation == self.generation:
                if self.size + len(body) > KEPT_BYTES:
                    self.cache.clear()
                    self.size = 0
                old = self.cache.pop(key, None)
                self.size += len(body) - (len(old[1]) if old else 0)
                self.cache[key] = (time.monotonic(), body)
        return body

    def regions(self) -> list[dict[str, Any]]:
        with session_scope(self.url) as s:
            rows = s.execute(select(RegionModel).order_by(RegionModel.id)).scalars().all()
            envs = s.execute(
                select(CandidateModel.region_id, EnvironmentModel.fingerprint,
                       EnvironmentModel.details).distinct()
                .join(EnvironmentModel, EnvironmentModel.id == CandidateModel.environment_id)
                .order_by(EnvironmentModel.fingerprint)).all()
            declared = set(s.execute(select(WinnerModel.region_id, WinnerModel.environment_id,
                                            EnvironmentModel.fingerprint)
                                     .join(EnvironmentModel,
                                           EnvironmentModel.id == WinnerModel.environment_id)))
        won = {(r, fp) for r, _, fp in declared}
        out = []
        for r in rows:
            canonical = json.loads(r.canonical)
            out.append({
                "name": r.name, "key": r.key, "kind": r.kind, "dtype": "f32",
                "shape": {k: v for k, v in canonical.items()
                          if isinstance(v, int) and not isinstance(v, bool)},
                "environments": [_environment(fp, details, (r.id, fp) in won)
                                 for rid, fp, details in envs if rid == r.id]})
        return out

    def best(self, ref: str, budget: float | None = None,
             fingerprint: str | None = None) -> dict:
        """By region name or key."""
        with session_scope(self.url) as s:
            found = s.execute(select(RegionModel).where(
                (RegionModel.key == ref) | (RegionModel.name == ref))).scalars().all()
        if not found:
            raise Problem(404, f"no region named or keyed {ref!r} in the records")
        exact = [r for r in found if r.key == ref]
        if len(found) > 1 and not exact:
            keys = ", ".join(r.key for r in found)
            raise Problem(409, f"{len(found)} regions are named {ref!r} (keys {keys}): ask by key")
        row = (exact or found)[0]
        region = region_from_canonical(row.canonical).with_name(row.name)
        return self._best(region, row.id, budget, fingerprint, by_content=False)

    def best_of(self, region: Region, unnamed: bool, budget: float | None = None,
                fingerprint: str | None = None) -> dict:
        """By content (`parse_region`); a region the table did not name is answered under the
        name it was tuned with."""
        with session_scope(self.url) as s:
            found = s.execute(select(RegionModel.id, RegionModel.name)
                              .where(RegionModel.key == region.key)).first()
        if found is not None and self._envs(found[0]):
            if unnamed:
                region = region.with_name(found[1])
            return self._best(region, found[0], budget, fingerprint, by_content=True)
        # a shape never tuned here: the nearest tuned shape of its op chain answers
        env_id, fp = self._environment(fingerprint)
        near = nearest(self.records, region, env_id, budget_of(region, budget), fp)
        if near is None:
            raise Problem(404, f"region {region.describe()} was never tuned, nor a shape of "
                          "its op chain near it")
        return near

    def _environment(self, fingerprint: str | None) -> tuple[int, str]:
        with session_scope(self.url) as s:
            envs = s.execute(select(EnvironmentModel.id, EnvironmentModel.fingerprint)).all()
        if fingerprint:
            envs = [e for e in envs if e[1] == fingerprint]
        if not envs:
            raise Problem(404, f"no records under fingerprint {fingerprint!r}" if fingerprint
                          else "no records yet")
        if len(envs) > 1:
            raise Problem(409, f"the records hold {len(envs)} environments: give fingerprint=")
        return envs[0][0], envs[0][1]

    def _envs(self, region_id: int) -> list[tuple[int, str]]:
        """The environments with sweep results for this region: (id, fingerprint)."""
        with session_scope(self.url) as s:
            return [(i, fp) for i, fp in s.execute(
                select(EnvironmentModel.id, EnvironmentModel.fingerprint).distinct()
                .join(CandidateModel, CandidateModel.environment_id == EnvironmentModel.id)
                .join(MeasurementModel, MeasurementModel.candidate_id == CandidateModel.id)
                .where(CandidateModel.region_id == region_id,
                       MeasurementModel.kind == SWEEP))]

    def _best(self, region: Region, region_id: int, budget: float | None,
              fingerprint: str | None, *, by_content: bool) -> dict:
        envs = self._envs(region_id)
        if fingerprint:
            envs = [e for e in envs if e[1] == fingerprint]
            if not envs:
                raise Problem(404, f"region {region.label!r} has no records under fingerprint "
                              f"{fingerprint!r} (GET /v1/regions lists its environments)")
        if not envs:
            raise Problem(404, f"region {region.label!r} has no recorded results")
        if len(envs) > 1:
            raise Problem(409, f"region {region.label!r} was tuned under {len(envs)} "
                          f"fingerprints ({', '.join(sorted(e[1] for e in envs))}): give "
                          "fingerprint=")
        env_id, fp = envs[0]
        if budget is None and not by_content:  # a table says its budget, or the default
            declared = self.records.winners(region_id, env_id)
            budget = declared[-1]["budget"] if declared else None
        b = budget_of(region, budget)
        try:
            row = answer(self.records, region, region_id, env_id, b, fp)
        except StoreError:
            raise  # (the database away: a 503)
        except ArbiterError as e:
            raise Problem(404, one_line(str(e))) from None
        if row is None:
            raise Problem(404, f"region {region.label!r} has no recorded results")
        return row


def _environment(fingerprint: str, details: str, declared: bool) -> dict[str, Any]:
    d = json.loads(details)
    return {"fingerprint": fingerprint, "cpu": d.get("cpu"), "usable_cpus": d.get("usable_cpus"),
            "gpu": d.get("gpu") or {}, "declared": declared}
