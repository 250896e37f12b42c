"""Finished trials into an Optuna study in the database, a few statements each.

`Study.add_trial` writes a finished trial as a running one and then sets each parameter and
attribute through Optuna's ORM, looking the trial up again and checking the parameter's
distribution against earlier trials for every one of them: ~32 statements and ~7 ms for an
x86_c candidate on SQLite, 95% of it Python. The search writes one per measured candidate, and
with a warm build cache that was more than the worker's check could hide.

Here the same rows go in through Optuna's own tables (so the installed version's column types
and datetime convention apply) as Core statements (on SQLite, run on the driver's cursor:
`_store.driver`), every pending trial in one transaction:
the study's row locked first, as Optuna does (several workers on PostgreSQL), the trials' rows
inserted (returning their ids) and numbered by the trials before them, then their parameters,
values and attributes: one statement per table for the whole batch. The distributions need
no check: a study's name carries a hash of its lanes' spaces, so they never change within it.
Tables that do not fit (another Optuna's) turn the fast path off for the rest of the run; a
database error sends that batch through `add_trial`, which raises if the database itself is
failing. A test holds both paths to the same trials read back through Optuna.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.exc import SQLAlchemyError

from ._samplers import ATTR
from ._store.driver import DriverError, by_driver, compiled, driver_cursor

__all__ = ["TrialWriter"]


def _candidate(trial: Any) -> Any:
    return trial.user_attrs.get(ATTR, {}).get("candidate")


class TrialWriter:
    def __init__(self, study: Any, storage: Any, study_id: int) -> None:
        self.study, self.storage, self.study_id = study, storage, study_id
        self.fast = True
        self._tables: _Tables | None = None

    def add(self, trials: Sequence[Any]) -> None:
        """Write finished trials, in order; all of them or (raising) none on the fast path."""
        if not trials:
            return
        if self.fast:
            try:
                self._insert(trials)
                return
            except (ImportError, AttributeError, TypeError, KeyError):
                self.fast = False  # rolled back: nothing was written
            except (SQLAlchemyError, DriverError):
                pass  # rolled back; a busy database may well take the slow path
        # an error raised by a commit that landed (a connection lost in COMMIT) must not
        # write the batch twice: the study's own view of which candidates it holds decides
        held = self.held()
        for t in trials:
            if _candidate(t) is None or _candidate(t) not in held:
                self.study.add_trial(t)

    def held(self) -> set[Any]:
        """The candidates (ids) of the study's finished trials."""
        from optuna.trial import TrialState

        return {_candidate(t) for t in
                self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}

    def _insert(self, trials: Sequence[Any]) -> None:
        from optuna.distributions import distribution_to_json
        from optuna.storages._rdb import models as m

        if self._tables is None:
            self._tables = _Tables(m)
        tb = self._tables
        sid = {"sid": self.study_id}
        params: list[dict[str, Any]] = []
        values: list[dict[str, Any]] = []
        user: list[dict[str, Any]] = []
        system: list[dict[str, Any]] = []
        with self.storage.engine.begin() as conn:
            if conn.execute(tb.lock, sid).first() is None:
                raise KeyError(f"study {self.study_id} is gone")
            ids = self._trial_rows(conn, trials)
            for tid, t in zip(ids, trials):
                params += [{"trial_id": tid, "param_name": name,
                            "param_value": t.distributions[name].to_internal_repr(value),
                            "distribution_json": distribution_to_json(t.distributions[name])}
                           for name, value in t.params.items()]
                if t.value is not None:
                    value, kind = m.TrialValueModel.value_to_stored_repr(t.value)
                    values.append({"trial_id": tid, "objective": 0, "value": value,
                                   "value_type": kind})
                user += [{"trial_id": tid, "key": k, "value_json": json.dumps(v)}
                         for k, v in t.user_attrs.items()]
                system += [{"trial_id": tid, "key": k, "value_json": json.dumps(v)}
                           for k, v in t.system_attrs.items()]
            for name, table, rows in (("params", tb.params, params),
                                      ("values", tb.values, values),
                                      ("user attrs", tb.user, user),
                                      ("system attrs", tb.system, system)):
                if not rows:
                    continue
                if by_driver(conn):
                    cur = driver_cursor(conn)
                    try:
                        compiled(f"optuna {name}", table.insert(), table, conn.dialect,
                                 list(rows[0])).run_many(cur, rows)
                    finally:
                        cur.close()
                else:
                    conn.execute(table.insert(), rows)

    def _trial_rows(self, conn: Any, trials: Sequence[Any]) -> list[int]:
        """Insert the trials' rows, numbered as Optuna numbers them (the study's trials
        inserted before each); their ids, in order. Inserted as one batch that returns its
        ids in order (one statement on PostgreSQL; SQLAlchemy sends SQLite one per row),
        numbered by one count and one batched update."""
        tb = self._tables
        assert tb is not None
        rows = [{"number": None, "study_id": self.study_id, "state": t.state,
                 "datetime_start": t.datetime_start, "datetime_complete": t.datetime_complete}
                for t in trials]
        if by_driver(conn):
            return _driver_trial_rows(conn, tb, rows, self.study_id)
        if len(rows) > 1 and getattr(conn.dialect,
                                     "insert_executemany_returning_sort_by_parameter_order", False):
            ids = list(conn.execute(tb.trial.insert().returning(
                tb.trial.c.trial_id, sort_by_parameter_order=True), rows).scalars())
        else:
            ids = [conn.execute(tb.trial.insert(), row).inserted_primary_key[0] for row in rows]
        # the study's row is locked (and on SQLite the first insert took the write lock): no
        # other trial of this study comes between these
        first = conn.execute(tb.count, {"sid": self.study_id, "tid": ids[0]}).scalar_one()
        conn.execute(tb.number, [{"tid": tid, "n": first + i} for i, tid in enumerate(ids)])
        return ids


def _driver_trial_rows(conn: Any, tb: _Tables, rows: list[dict[str, Any]],
                       study_id: int) -> list[int]:
    """`_trial_rows` on SQLite's own cursor (`_store.driver`): each row's id is the cursor's
    last row id."""
    cur = driver_cursor(conn)
    try:
        add = compiled("optuna trial", tb.trial.insert(), tb.trial, conn.dialect,
                       list(rows[0]))
        ids = [add.run(cur, row).lastrowid for row in rows]
        count = compiled("optuna count", tb.count, tb.trial, conn.dialect, ["sid", "tid"])
        first = count.run(cur, {"sid": study_id, "tid": ids[0]}).fetchone()[0]
        compiled("optuna number", tb.number, tb.trial, conn.dialect, ["tid", "n"]).run_many(
            cur, [{"tid": tid, "n": first + i} for i, tid in enumerate(ids)])
        return ids
    finally:
        cur.close()


class _Tables:
    """Optuna's tables and the statements on them, built once (building costs more than
    running them)."""

    def __init__(self, m: Any) -> None:
        study, self.trial = m.StudyModel.__table__, m.TrialModel.__table__
        self.params, self.values = m.TrialParamModel.__table__, m.TrialValueModel.__table__
        self.user = m.TrialUserAttributeModel.__table__
        self.system = m.TrialSystemAttributeModel.__table__
        self.lock = select(study.c.study_id).where(
            study.c.study_id == bindparam("sid")).with_for_update()
        self.count = select(func.count(self.trial.c.trial_id)).where(
            self.trial.c.study_id == bindparam("sid"), self.trial.c.trial_id < bindparam("tid"))
        self.number = update(self.trial).where(
            self.trial.c.trial_id == bindparam("tid")).values(number=bindparam("n"))
