"""Finished trials into an Optuna study in the database, a few statements each.

`Study.add_trial` writes a finished trial as a running one and then sets each parameter and
attribute through Optuna's ORM, looking the trial up again and checking the parameter's
distribution against earlier trials for every one of them: ~32 statements and ~7 ms for an
x86_c candidate on SQLite, 95% of it Python. The search writes one per measured candidate, and
with a warm build cache that was more than the worker's check could hide.

Here the same rows go in through Optuna's own tables (so the installed version's column types
apply, and its datetime convention: `_stored_time`) as Core statements (on SQLite, run on the
driver's cursor: `_store.driver`), every pending trial in one transaction: the study's row
locked first, as Optuna does (several workers on PostgreSQL), the trials' rows inserted
(returning their ids) and numbered by the trials before them, then their parameters, values
and attributes: one statement per table for the whole batch. The distributions need no check:
a study's name carries a hash of its lanes' spaces, so they never change within it. The
trials come as `Finished`, not as Optuna's `FrozenTrial`, whose checks and conversions cost
more than writing the rows. The study itself is found or made the same way (`opened`): Optuna's
own create and load compile their ORM statements anew for each file's engine (~10 ms).
Tables that do not fit (another Optuna's) turn the fast path off for the rest of the run; a
database error sends that batch through `add_trial`, which raises if the database itself is
failing. A test holds both paths to the same trials read back through Optuna.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from ._samplers import ATTR
from ._store.driver import DriverError, DriverIntegrityError, transaction

__all__ = ["Finished", "TrialWriter", "opened"]

# Optuna's tables do not fit this writer: its own API instead
_UNEXPECTED = (ImportError, AttributeError, TypeError, KeyError)


@dataclass(frozen=True)
class Finished:
    """A finished trial for the studies: Optuna's `create_trial` of it is `frozen()`. The
    database study's rows are written from it as given, without that function's checks and
    conversions: the search's values are valid by construction (each parameter one of its
    distribution's choices, a float value)."""

    params: dict[str, Any]
    distributions: dict[str, Any]
    value: float
    attrs: dict[str, Any]  # the user attr `ATTR`: candidate, status, rel_error, constraint
    at: datetime = field(default_factory=datetime.now)  # started and completed (local time)

    def frozen(self) -> Any:
        import optuna

        t = optuna.trial.create_trial(
            params=dict(self.params), distributions=self.distributions, value=self.value,
            user_attrs={ATTR: self.attrs},
            system_attrs={"constraints": (self.attrs["constraint"],)})
        t.datetime_start = t.datetime_complete = self.at
        return t


def opened(storage: Any, name: str) -> TrialWriter:
    """The study `name` in Optuna's `storage`, ready to be written to: found, or made with the
    rows `optuna.create_study` adds (minimizing), in Core statements. A trial of it left
    RUNNING (by a killed sweep of an older arbiter, which asked on this study) is set FAIL
    through Optuna: it never finishes; its result, if it got that far, is in our records and
    is told again."""
    from optuna.trial import TrialState

    writer = TrialWriter(storage, name)
    try:
        running = writer._found_or_made()
    except _UNEXPECTED:
        writer.fast = False
        running = writer._found_or_made_by_optuna()
    for trial_id in running:
        storage.set_trial_state_values(trial_id, TrialState.FAIL)
    return writer


class TrialWriter:
    def __init__(self, storage: Any, name: str) -> None:
        self.storage, self.name = storage, name
        self.study_id: int = -1  # set by `opened`
        self.fast = True
        self._study: Any = None
        self._tables: _Tables | None = None
        self._json: dict[Any, str] = {}  # distribution -> its JSON

    @property
    def study(self) -> Any:
        """Optuna's study object, for the slow path (loaded when first needed)."""
        if self._study is None:
            import optuna
            from optuna.samplers import RandomSampler

            # nothing is sampled on this study; the sampler lives on the in-memory one
            self._study = optuna.load_study(study_name=self.name, storage=self.storage,
                                            sampler=RandomSampler())
        return self._study

    def add(self, trials: Sequence[Finished]) -> None:
        """Write finished trials, in order; all of them or (raising) none on the fast path."""
        if not trials:
            return
        if self.fast:
            try:
                self._insert(trials)
                return
            except _UNEXPECTED:
                self.fast = False  # rolled back: nothing was written
            except (SQLAlchemyError, DriverError):
                pass  # rolled back; a busy database may well take the slow path
        # an error raised by a commit that landed (a connection lost in COMMIT) must not
        # write the batch twice: the study's own view of which candidates it holds decides
        held = self.held()
        for t in trials:
            if t.attrs.get("candidate") is None or t.attrs["candidate"] not in held:
                self.study.add_trial(t.frozen())

    def held(self) -> set[Any]:
        """The candidates (ids) of the study's finished trials."""
        from optuna.trial import TrialState

        if self.fast:
            try:
                return self._held()
            except _UNEXPECTED:
                self.fast = False
        return {t.user_attrs.get(ATTR, {}).get("candidate") for t in
                self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}

    def _tb(self) -> _Tables:
        if self._tables is None:
            from optuna.storages._rdb import models

            self._tables = _Tables(models)
        return self._tables

    def _found_or_made(self) -> list[int]:
        """Find or make the study (its id set); the ids of its RUNNING trials."""
        try:
            return self._found_or_made_once()
        except (IntegrityError, DriverIntegrityError):
            return self._found_or_made_once()  # made by another sweep meanwhile: found now

    def _found_or_made_once(self) -> list[int]:
        from optuna.study import StudyDirection
        from optuna.trial import TrialState

        tb = self._tb()
        with transaction(self.storage.engine) as run:
            got = run.rows("optuna study", tb.find, tb.study, {"study_name": self.name})
            if got:
                self.study_id = got[0][0]
                return [r[0] for r in run.rows("optuna running", tb.in_state, tb.trial, {
                    "study_id": self.study_id, "state": TrialState.RUNNING})]
            [self.study_id] = run.added("optuna new study", tb.insert["studies"], tb.study,
                                        [{"study_name": self.name}])
            run.many("optuna direction", tb.insert["study_directions"], tb.direction, [{
                "study_id": self.study_id, "direction": StudyDirection.MINIMIZE,
                "objective": 0}])
            return []

    def _found_or_made_by_optuna(self) -> list[int]:
        import optuna
        from optuna.samplers import RandomSampler
        from optuna.trial import TrialState

        self._study = optuna.create_study(study_name=self.name, storage=self.storage,
                                          sampler=RandomSampler(), direction="minimize",
                                          load_if_exists=True)
        self.study_id = self.storage.get_study_id_from_name(self.name)
        return [t._trial_id for t in
                self._study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]

    def _held(self) -> set[Any]:
        from optuna.trial import TrialState

        tb = self._tb()
        with transaction(self.storage.engine) as run:
            got = run.rows("optuna held", tb.held, tb.trial, {
                "study_id": self.study_id, "state": TrialState.COMPLETE, "key": ATTR})
        return {json.loads(value).get("candidate") for (value,) in got}

    def _insert(self, trials: Sequence[Finished]) -> None:
        from optuna.distributions import distribution_to_json
        from optuna.trial import TrialState

        tb = self._tb()
        with transaction(self.storage.engine) as run:
            if not run.rows("optuna lock", tb.lock, tb.study, {"study_id": self.study_id}):
                raise KeyError(f"study {self.study_id} is gone")
            ids = run.added("optuna trial", tb.insert["trials"], tb.trial, [{
                "number": None, "study_id": self.study_id, "state": TrialState.COMPLETE,
                "datetime_start": tb.stored_time(t.at),
                "datetime_complete": tb.stored_time(t.at)} for t in trials])
            # the study's row is locked (and on SQLite the first insert took the write lock):
            # no other trial of this study comes between these
            [(first,)] = run.rows("optuna count", tb.count, tb.trial,
                                  {"study_id": self.study_id, "tid": ids[0]})
            run.many("optuna number", tb.number, tb.trial,
                     [{"tid": tid, "n": first + i} for i, tid in enumerate(ids)])
            params: list[dict[str, Any]] = []
            values: list[dict[str, Any]] = []
            user: list[dict[str, Any]] = []
            system: list[dict[str, Any]] = []
            for tid, t in zip(ids, trials):
                for name, value in t.params.items():
                    d = t.distributions[name]
                    encoded = self._json.get(d)
                    if encoded is None:
                        encoded = self._json[d] = distribution_to_json(d)
                    params.append({"trial_id": tid, "param_name": name,
                                   "param_value": d.to_internal_repr(value),
                                   "distribution_json": encoded})
                stored, kind = tb.stored_value(t.value)
                values.append({"trial_id": tid, "objective": 0, "value": stored,
                               "value_type": kind})
                user.append({"trial_id": tid, "key": ATTR, "value_json": json.dumps(t.attrs)})
                system.append({"trial_id": tid, "key": "constraints",
                               "value_json": json.dumps((t.attrs["constraint"],))})
            for name, table, rows in (("params", tb.params, params),
                                      ("values", tb.values, values),
                                      ("user attrs", tb.user, user),
                                      ("system attrs", tb.system, system)):
                run.many(f"optuna {name}", tb.insert[table.name], table, rows)


def _stored_time(m: Any) -> Callable[[datetime], datetime]:
    """A trial's time (naive, local) as the installed Optuna's trial model stores it: naive
    UTC where the model converts it in a property (Optuna 5), else as given."""
    if isinstance(inspect.getattr_static(m.TrialModel, "datetime_start", None), property):
        return lambda t: t.astimezone(timezone.utc).replace(tzinfo=None)
    return lambda t: t


class _Tables:
    """Optuna's tables and the statements on them, built once (building costs more than
    running them)."""

    def __init__(self, m: Any) -> None:
        self.study, self.trial = m.StudyModel.__table__, m.TrialModel.__table__
        self.direction = m.StudyDirectionModel.__table__
        self.params, self.values = m.TrialParamModel.__table__, m.TrialValueModel.__table__
        self.user = m.TrialUserAttributeModel.__table__
        self.system = m.TrialSystemAttributeModel.__table__
        self.stored_value = m.TrialValueModel.value_to_stored_repr
        self.stored_time = _stored_time(m)
        study, trial = self.study, self.trial
        self.insert = {t.name: t.insert() for t in (study, self.direction, trial, self.params,
                                                    self.values, self.user, self.system)}
        self.find = select(study.c.study_id).where(study.c.study_name == bindparam("study_name"))
        self.lock = select(study.c.study_id).where(
            study.c.study_id == bindparam("study_id")).with_for_update()
        self.in_state = select(trial.c.trial_id).where(
            trial.c.study_id == bindparam("study_id"), trial.c.state == bindparam("state"))
        self.held = select(self.user.c.value_json).join(
            trial, trial.c.trial_id == self.user.c.trial_id).where(
            trial.c.study_id == bindparam("study_id"), trial.c.state == bindparam("state"),
            self.user.c.key == bindparam("key"))
        self.count = select(func.count(trial.c.trial_id)).where(
            trial.c.study_id == bindparam("study_id"), trial.c.trial_id < bindparam("tid"))
        self.number = update(trial).where(
            trial.c.trial_id == bindparam("tid")).values(number=bindparam("n"))
