"""Finished trials into an Optuna study in the database, a few statements each.

`Study.add_trial` writes a finished trial as a running one and then sets each parameter and
attribute through Optuna's ORM, looking the trial up again and checking the parameter's
distribution against earlier trials for every one of them: ~32 statements and ~7 ms for an
x86_c candidate on SQLite, 95% of it Python. The search writes one per measured candidate, and
with a warm build cache that was more than the worker's check could hide.

Here the same rows are built from Optuna's own models (so the installed version's column
types and datetime convention apply) and added in one flush per trial; as in Optuna, the
study's row is locked first (several workers on PostgreSQL) and the trial number is counted
inside the same transaction. The distributions need no check: a study's name carries a hash
of its lanes' spaces, so they never change within it. Models that do not fit (another
Optuna's) turn the fast path off for the rest of the run; a database error sends that one
trial through `add_trial`, which raises if the database itself is failing. A test holds both
paths to the same trials read back through Optuna.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

__all__ = ["TrialWriter"]


class TrialWriter:
    def __init__(self, study: Any, storage: Any, study_id: int) -> None:
        self.study, self.storage, self.study_id = study, storage, study_id
        self.fast = True

    def add(self, trial: Any) -> None:
        if self.fast:
            try:
                self._insert(trial)
                return
            except (ImportError, AttributeError, TypeError, KeyError):
                self.fast = False  # rolled back: nothing was written
            except SQLAlchemyError:
                pass  # rolled back; a busy database may well take the slow path
        self.study.add_trial(trial)

    def _insert(self, t: Any) -> None:
        from optuna.distributions import distribution_to_json
        from optuna.storages._rdb import models as m

        session = self.storage.scoped_session()
        try:
            m.StudyModel.find_or_raise_by_id(self.study_id, session, for_update=True)
            row = m.TrialModel(study_id=self.study_id, number=None, state=t.state,
                               datetime_start=t.datetime_start,
                               datetime_complete=t.datetime_complete)
            session.add(row)
            session.flush()
            rows: list[Any] = [
                m.TrialParamModel(trial_id=row.trial_id, param_name=name,
                                  param_value=t.distributions[name].to_internal_repr(value),
                                  distribution_json=distribution_to_json(t.distributions[name]))
                for name, value in t.params.items()]
            if t.value is not None:
                value, kind = m.TrialValueModel.value_to_stored_repr(t.value)
                rows.append(m.TrialValueModel(trial_id=row.trial_id, objective=0, value=value,
                                              value_type=kind))
            rows += [m.TrialUserAttributeModel(trial_id=row.trial_id, key=k,
                                               value_json=json.dumps(v))
                     for k, v in t.user_attrs.items()]
            rows += [m.TrialSystemAttributeModel(trial_id=row.trial_id, key=k,
                                                 value_json=json.dumps(v))
                     for k, v in t.system_attrs.items()]
            session.add_all(rows)
            row.number = row.count_past_trials(session)
            session.commit()
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()
