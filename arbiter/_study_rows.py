"""Finished trials into an Optuna study in the database, a few statements each.

`Study.add_trial` writes a finished trial as a running one and then sets each parameter and
attribute through Optuna's ORM, looking the trial up again and checking the parameter's
distribution against earlier trials for every one of them: ~32 statements and ~7 ms for an
x86_c candidate on SQLite, 95% of it Python. The search writes one per measured candidate, and
with a warm build cache that was more than the worker's check could hide.

Here the same rows are built from Optuna's own models (so the installed version's column
types and datetime convention apply) and added in one flush per trial; the trial number is
counted inside the same transaction, as Optuna does. The distributions need no check: a
study's name carries the lane versions, so its spaces never change. Anything unexpected from
the models (another Optuna's schema) falls back to `add_trial` for the rest of the run; a test
holds both paths to the same trials read back through Optuna.
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
            except (ImportError, AttributeError, TypeError, SQLAlchemyError):
                # rolled back, nothing written: the slow path writes it (and raises if the
                # database itself is the problem)
                self.fast = False
        self.study.add_trial(trial)

    def _insert(self, t: Any) -> None:
        from optuna.distributions import distribution_to_json
        from optuna.storages._rdb import models as m

        session = self.storage.scoped_session()
        try:
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
