"""The samplers `--sampler` names: the default's faster steps (search-space groups, categorical
sampling) propose exactly what Optuna's own TPE proposes."""

from __future__ import annotations

import warnings

import pytest

from arbiter._samplers import ATTR, DEFAULT_TPE, make_sampler, optuna_tpe
from arbiter._tpe_step import FOLLOWS

optuna = pytest.importorskip("optuna")


def _stock_tpe(seed: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return optuna_tpe(seed, **DEFAULT_TPE)


def _proposals(sampler, trials: int, direction: str = "minimize",
               numeric: bool = False) -> list[dict]:
    """Ask one ahead as the search does, on a space shaped like ours (a lane, and each lane's
    own tunables; `numeric`: one of them a float), with infeasible results, a dropped
    proposal and a pruned trial."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=sampler, direction=direction)

    def ask():
        t = study.ask()
        lane = t.suggest_categorical("lane", ["a", "b", "c"])
        if lane == "a":
            t.suggest_categorical("a.x", [1, 2, 4, 8])
            t.suggest_categorical("a.y", [0, 1])
        elif lane == "b":
            if numeric:
                t.suggest_float("b.z", 16, 64)
            else:
                t.suggest_categorical("b.z", [16, 32, 64])
        return t

    out = []
    current = ask()
    for i in range(trials):
        ahead = ask()
        p = current.params
        out.append(p)
        value = 1.0 + p.get("a.x", 3) * 0.1 + p.get("a.y", 0) + p.get("b.z", 20) / 64.0
        current.set_user_attr(ATTR, {"constraint": 1.0 if p.get("a.y") else -1.0})
        if i % 7 == 3:
            study.tell(current, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(current, value)
        if i % 5 == 2:  # a result among the best: the one asked without it is dropped
            study.tell(ahead, state=optuna.trial.TrialState.FAIL)
            ahead = ask()
        current = ahead
    return out


@pytest.mark.parametrize("seed,direction", [(0, "minimize"), (1, "minimize"), (7, "minimize"),
                                            (2, "maximize")])
def test_default_sampler_proposes_what_optunas_tpe_proposes(seed, direction):
    ours = make_sampler("tpe", seed)
    assert ours._group_decomposed_search_space is not None
    assert type(ours._group_decomposed_search_space).__name__ == "Growing"
    assert (_proposals(ours, 45, direction)
            == _proposals(_stock_tpe(seed), 45, direction))
    assert ours.fast is optuna.__version__.startswith(FOLLOWS)


def test_a_numerical_group_is_sampled_by_optunas_own_step():
    ours = make_sampler("tpe", 5)
    assert _proposals(ours, 40, numeric=True) == _proposals(_stock_tpe(5), 40, numeric=True)


def test_default_sampler_falls_back_to_optunas_sampling_where_its_internals_differ(
        monkeypatch):
    ours = make_sampler("tpe", 4)

    def unknown(*a):  # as if Optuna's private attributes had changed under it
        raise AttributeError("_parzen_estimator_parameters")

    monkeypatch.setattr(ours, "_categorical", unknown)
    assert _proposals(ours, 30) == _proposals(_stock_tpe(4), 30)
    assert ours.fast is False


def test_default_sampler_falls_back_to_optunas_step_where_its_internals_differ(monkeypatch):
    ours = make_sampler("tpe", 3)
    growing = ours._group_decomposed_search_space

    def unknown(study):  # as if Optuna's private classes had changed under it
        raise AttributeError("_search_spaces")

    monkeypatch.setattr(growing, "_grown", unknown)
    assert _proposals(ours, 30) == _proposals(_stock_tpe(3), 30)
    assert growing.fast is False
