"""A region's two studies: the sampler's, in memory, and Optuna's in the database.

Our `candidates` table is the source of truth; both studies are rebuilt from it. The sampler
asks and is told on the in-memory study (asking on the database study costs ~10 commits per
trial; for the TPE samplers it is our own, `_tpe_study`, else an Optuna study). The database
study, what `optuna-dashboard` shows, gets one finished trial per recorded candidate: opened
once its first trials are due (Optuna's storage once per file and process,
`_study_storage`; the study itself in milliseconds), or in the region's first window where
this process has paid the storage's imports already, and written (`TrialWriter`, a few
trials per transaction) by `flush`, which the search hands to `Worker.check` as its
`meanwhile`, so both run while a candidate builds and is checked, never beside a timing (a
region of fewer trials than `FLUSH_EVERY`, done within `FLUSH_AFTER_S`, opens and writes it
at its end)."""

from __future__ import annotations

import math
import time
from typing import Any

from sqlalchemy import inspect, text

from ._plan import Plan
from ._records import Result, finite
from ._samplers import make_study
from ._store import engine_for
from ._study_rows import Finished, TrialWriter, opened
from ._study_storage import load_soon, opened_before, storage_for
from ._values import Config

__all__ = ["FLUSH_AFTER_S", "FLUSH_EVERY", "Studies", "objective", "open_study", "params",
           "scored"]

FLUSH_EVERY = 8  # pending trials written to the database study in one transaction
FLUSH_AFTER_S = 2.0  # ... or fewer, this long after the last write


def _optuna() -> Any:
    """Optuna, imported (~0.1 s the first time) and told to log warnings only."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def params(lane: str, config: Config) -> dict[str, Any]:
    return {"lane": lane, **{f"{lane}.{k}": v for k, v in config.items}}


def scored(median: float | None, rel_error: float | None,
           budget: float) -> tuple[float, float]:
    """A result's trial value (median ms, inf when untimed) and accuracy constraint
    (`rel_error - budget`, 1 without a finite error)."""
    err = finite(rel_error)
    return (median * 1e3 if median is not None else math.inf,
            (err - budget) if err is not None else 1.0)


def objective(r: Result, budget: float) -> tuple[float, dict[str, Any]]:
    """The trial value and user attrs, constraint included."""
    value, constraint = scored(r.median, r.rel_error, budget)
    attrs = {"candidate": r.candidate_id, "status": r.status.value,
             "rel_error": finite(r.rel_error), "constraint": constraint}
    return value, attrs


def _distributions(p: Plan, lane: str) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution

    d = {"lane": CategoricalDistribution(sorted(p.lanes))}
    for t in p.spaces[lane].tunables:
        d[f"{lane}.{t.name}"] = CategoricalDistribution(t.choices)
    return d


def _expressible(p: Plan, r: Result) -> bool:
    """Can the space's distributions express this recorded config? (A rule breaker can: it is
    told as infeasible, as when the sampler asked it.)"""
    choices = {t.name: t.choices for t in p.spaces[r.lane].tunables}
    values = dict(r.config.items)
    return values.keys() == choices.keys() and all(v in choices[k] for k, v in values.items())


def open_study(url: str, name: str) -> TrialWriter:
    """The study in the database (finished trials only), ready to be written to."""
    _optuna()
    return opened(storage_for(url), name)


class Studies:
    """Both studies of one region's sweep, opened when first needed."""

    def __init__(self, url: str, name: str, p: Plan, budget: float,
                 sampler: tuple[str, int | None] | None) -> None:
        self.url, self.name, self.p, self.budget, self.sampler = url, name, p, budget, sampler
        self.db: TrialWriter | None = None
        self._memory: Any = None
        self.pending: list[Finished] = []  # for the database study, once it is open
        self._lanes: dict[str, dict[str, Any]] = {}  # lane -> its parameters' distributions
        self._written = time.monotonic()  # when the database study was last written

    def memory(self) -> Any:
        """The sampler's study, told every recorded candidate (in memory: milliseconds; our
        own for the TPE samplers, `_tpe_study`)."""
        if self._memory is None:
            _optuna()
            assert self.sampler is not None
            study = make_study(*self.sampler)
            for r in list(self.p.measured.values()):
                t = self._recorded(r)
                if t is not None:
                    study.add_trial(t.frozen())
            self._memory = study
        return self._memory

    def flush_and_ready(self) -> None:
        """`flush`, and the sampler's study made (a worker window hides it)."""
        self.flush()
        self.memory()

    def recorded(self, r: Result, sampler: bool = True) -> None:
        """A result measured without the sampler asking (defaults, enumeration); with
        `sampler` False, its study was told it already."""
        t = self._recorded(r)
        if t is not None:
            if self._memory is not None and sampler:
                self._memory.add_trial(t.frozen())
            self._pend(t)

    def asked(self, trial: Any, value: float, attrs: dict[str, Any]) -> None:
        """A trial the sampler asked for and was told: for the database study. (Its
        distributions are its lane's: the sampler was asked for those.)"""
        self._pend(Finished(dict(trial.params), self._distributions(trial.params["lane"]),
                            value, attrs))

    def _distributions(self, lane: str) -> dict[str, Any]:
        """`_distributions`, made once per lane (the writer knows each one's JSON by then)."""
        d = self._lanes.get(lane)
        if d is None:
            d = self._lanes[lane] = _distributions(self.p, lane)
        return d

    def _recorded(self, r: Result) -> Finished | None:
        """A recorded result as a finished trial (None: not expressible in this study)."""
        if not _expressible(self.p, r):
            return None
        value, attrs = objective(r, self.budget)
        return Finished(params(r.lane, r.config), self._distributions(r.lane), value, attrs)

    def flush(self) -> None:
        """Write the pending trials once they are due: `FLUSH_EVERY` of them, or
        `FLUSH_AFTER_S` since the last write (one transaction for several costs less than
        one each; the dashboard lags by about that). The records are already committed; a
        sweep killed before this write is caught up by the next run."""
        if self.db is None and not self.p.measured:  # the region's first window
            _optuna()  # for the sampler and this study
            if opened_before():
                # the imports are paid: this file's tables (~20 ms when it is new) and the
                # study are left, and this window (the region's references) hides them
                self.db = open_study(self.url, self.name)
            else:
                load_soon()
            return
        # the database study is opened when its first trials are due: Optuna's storage,
        # opened the first time in a process, needs Alembic and Optuna's models, loaded in a
        # thread since the first window (`load_soon`)
        if self._waiting() >= FLUSH_EVERY or self._late():
            self.flush_all()

    def _waiting(self) -> int:
        """Trials not in the database study yet (before it opens: every recorded one)."""
        return len(self.pending) if self.db is not None else len(self.p.measured)

    def _late(self) -> bool:
        return self._waiting() > 0 and time.monotonic() - self._written >= FLUSH_AFTER_S

    def flush_all(self) -> None:
        """Open the database study (adding every recorded candidate it lacks), then write
        what is pending. Nothing before the first record: nothing to write yet."""
        if self.db is None:
            if not self.p.measured:
                return
            self.db = open_study(self.url, self.name)
            known = self.db.held()
            self.pending = [t for r in list(self.p.measured.values())
                            if r.candidate_id not in known
                            and (t := self._recorded(r)) is not None]
        pending, self.pending = self.pending, []
        self.db.add(pending)
        self._written = time.monotonic()

    def _pend(self, t: Finished) -> None:
        if self.db is not None:  # else `flush_all` reads it from the plan when it opens
            self.pending.append(t)
        if self._waiting() > FLUSH_EVERY or (self.db is not None and self._late()):
            # overdue: a run of refused configs (recorded without a worker window to write
            # in), or trials slower than FLUSH_AFTER_S (one write each costs nothing there).
            # Late, the study is opened in a window only: Optuna's storage, opened the first
            # time, took 0.3-0.6 s on 2 busy cores, and a record outside a window may be one
            # the next candidate waits for (after a result that dropped the proposal asked
            # ahead)
            self.flush_all()

    def behind(self) -> bool:
        """Does the database study hold fewer trials than there are recorded candidates (a
        sweep killed after its last record, before its writes)? One count, no Optuna import."""
        if not any(_expressible(self.p, r) for r in self.p.measured.values()):
            return False
        with engine_for(self.url).connect() as conn:
            if not inspect(conn).has_table("studies"):
                return True
            n = conn.execute(text(
                "SELECT count(*) FROM trials t JOIN studies s ON s.study_id = t.study_id "
                "WHERE s.study_name = :name AND t.state = 'COMPLETE'"), {"name": self.name}
            ).scalar_one()
        return n < sum(1 for r in self.p.measured.values() if _expressible(self.p, r))
