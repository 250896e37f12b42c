"""The samplers `--sampler` names: the TPE ones ask on our own study (`_tpe_study`), which
proposes exactly what Optuna's TPESampler with the same settings proposes on an Optuna study."""

from __future__ import annotations

import math

import pytest

from arbiter._asker import _tell
from arbiter._samplers import ATTR, TPE, make_sampler, make_study
from arbiter._study_rows import Finished
from arbiter._tpe_study import FOLLOWS, TPEStudy

optuna = pytest.importorskip("optuna")

LANES = ["a", "b", "c"]  # c has no tunables, a has one with a single choice
SPACE = {"a": {"a.x": [1, 2, 4, 8], "a.y": [0, 1], "a.s": [3]}, "b": {"b.z": [16, 32, 64]},
         "c": {}}


def _optuna_study(name: str, seed: int):
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    return optuna.create_study(sampler=make_sampler(name, seed), direction="minimize")


def _value(p: dict) -> float:
    return 1.0 + p.get("a.x", 3) * 0.1 + p.get("a.y", 0) + p.get("b.z", 20) / 64.0


def _proposals(study, trials: int) -> list[dict]:
    """Drive a study as the search does, on a space shaped like ours: recorded results added
    first, then asking one ahead, with infeasible and untimed (inf) results, proposals
    dropped (told failed), enqueued picks, and a NaN value."""
    from optuna.distributions import CategoricalDistribution

    for lane, params, value in (("c", {}, 2.0), ("a", {"a.x": 2, "a.y": 0, "a.s": 3}, 1.5)):
        dists = {"lane": CategoricalDistribution(LANES), **{
            n: CategoricalDistribution(c) for n, c in SPACE[lane].items()}}
        study.add_trial(Finished({"lane": lane, **params}, dists, value,
                                 {"constraint": -1.0}).frozen())

    def ask(enqueue: dict | None = None):
        if enqueue is not None:
            study.enqueue_trial(enqueue, skip_if_exists=False)
        t = study.ask()
        lane = t.suggest_categorical("lane", LANES)
        for name, choices in SPACE[lane].items():
            t.suggest_categorical(name, choices)
        return t

    out = []
    current = ask()
    for i in range(trials):
        ahead = ask({"lane": "b", "b.z": 32} if i % 11 == 5 else None)
        p = dict(current.params)
        out.append(p)
        value = math.inf if i % 9 == 4 else math.nan if i == 17 else _value(p)
        current.set_user_attr(ATTR, {"constraint": 1.0 if p.get("a.y") else -1.0})
        _tell(study, current, value)
        if i % 5 == 2:  # a result among the best: the one asked without it is dropped
            _tell(study, ahead, failed=True)
            ahead = ask()
        current = ahead
    return out


@pytest.mark.skipif(not optuna.__version__.startswith(FOLLOWS),
                    reason=f"our TPE study follows Optuna {FOLLOWS}x's TPESampler")
@pytest.mark.parametrize("name", list(TPE))
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_our_tpe_study_proposes_what_optunas_tpe_proposes(name, seed):
    ours = make_study(name, seed)
    assert isinstance(ours, TPEStudy)
    proposed = _proposals(ours, 60)
    assert proposed == _proposals(_optuna_study(name, seed), 60)
    assert len({tuple(sorted(p.items())) for p in proposed}) > 5  # not one config repeated


def test_other_samplers_ask_on_an_optuna_study():
    assert isinstance(make_study("random", 0), optuna.Study)


def test_the_good_trials_are_the_best_tenth_of_the_finished_feasible_ones():
    study = TPEStudy(0, multivariate=True, group=True, n_startup_trials=10)
    values = [5.0, 3.0, 9.0, 1.0, 7.0, 2.0, 8.0, 4.0, 6.0]
    for v in values:  # one infeasible result at the best value: never among the good
        t = study.ask()
        t.suggest_categorical("lane", ["c"])
        t.set_user_attr(ATTR, {"constraint": 0.5 if v == 1.0 else -0.1})
        study.tell(t, v)
    running = study.ask()
    assert study.good_now(running) is None  # 9 finished: still the random start
    ahead = study.ask()
    # the running trial taken as finished, best of all: 10 finished, the good one is it
    assert study.good_now(ahead, {running.number: (0.0, 0.5)}) == {running.number}
    running.set_user_attr(ATTR, {"constraint": -1.0})
    study.tell(running, 2.5)
    assert study.good_now(ahead) == {5}  # 2.0: the best feasible
    for v in (10.0, 11.0):
        t = study.ask()
        t.suggest_categorical("lane", ["c"])
        t.set_user_attr(ATTR, {"constraint": -1.0})
        study.tell(t, v)
    assert study.good_now(ahead) == {5, 9}  # 12 finished: two good (2.0, 2.5)


def test_a_value_outside_the_choices_and_a_second_tell_are_refused():
    study = TPEStudy(0)
    study.enqueue_trial({"lane": "z"})
    t = study.ask()
    with pytest.raises(ValueError, match="not one of lane's choices"):
        t.suggest_categorical("lane", ["a", "b"])
    t = study.ask()
    assert t.suggest_categorical("lane", ["a", "b"]) in ("a", "b")
    study.tell(t, 1.0)
    with pytest.raises(ValueError, match="not running"):
        study.tell(t, 2.0)


@pytest.mark.skipif(not optuna.__version__.startswith(FOLLOWS),
                    reason=f"our TPE study follows Optuna {FOLLOWS}x's TPESampler")
@pytest.mark.parametrize("seed", [0, 3])
def test_a_running_trial_that_drew_a_new_groups_values_alone_is_seen_as_optuna_sees_it(seed):
    # lane b's group appears in no finished trial when its first trial is asked, so that
    # trial draws b's values on its own; then a finished b trial arrives while it still runs:
    # the constant liar must see its whole proposal, the values drawn alone included
    from optuna.distributions import CategoricalDistribution

    space = {"a": {"a.x": [1, 2, 4, 8], "a.y": [0, 1]}, "b": {"b.z": [16, 32, 64],
                                                            "b.w": [0, 1, 2]}}

    def dists(lane):
        return {"lane": CategoricalDistribution(["a", "b"]), **{
            n: CategoricalDistribution(c) for n, c in space[lane].items()}}

    def run(study):
        import random

        r = random.Random(seed)
        for _ in range(10):
            p = {n: r.choice(c) for n, c in space["a"].items()}
            study.add_trial(Finished({"lane": "a", **p}, dists("a"), r.random(),
                                     {"constraint": -1.0}).frozen())
        out, kept = [], None
        for _ in range(40):
            t = study.ask()
            lane = t.suggest_categorical("lane", ["a", "b"])
            for n, c in space[lane].items():
                t.suggest_categorical(n, c)
            out.append(dict(t.params))
            if lane == "b" and kept is None:
                kept = t  # left running
                study.add_trial(Finished({"lane": "b", "b.z": 16, "b.w": 0}, dists("b"), 0.1,
                                         {"constraint": -1.0}).frozen())
                continue
            t.set_user_attr(ATTR, {"constraint": -1.0})
            _tell(study, t, r.random() + (0.0 if lane == "a" else 0.5))
        assert kept is not None
        return out

    assert run(make_study("tpe", seed)) == run(_optuna_study("tpe", seed))
