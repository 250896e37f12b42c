"""Which candidates next, for one region.

Every lane's default comes first (the smallest spaces, i.e. the vendor libraries, leading), so
the library is always a measured candidate. Then the whole space when it fits the trial budget,
in a seeded order, or else the sampler's proposals: lane is a categorical parameter and each
lane's tunables are conditional on it (define-by-run), named `<lane>.<tunable>`. The sampler
asks and is told on an in-memory Optuna study, given every recorded result when it is made; a
trial's value is the candidate's latency in ms, and its accuracy is a constraint
(`rel_error - budget <= 0`). Proposals come a batch at a time (they build together); the TPE
samplers see the ones still in flight as pending (constant liar).

"""

from __future__ import annotations

import math
import random
import warnings
from dataclasses import dataclass
from typing import Any

from ..lane import Config
from ..records import Result, finite
from ._plan import Plan
from ._samplers import make_sampler

__all__ = ["Proposal", "Search", "frozen_trial"]

DUPES_BEFORE_DRAW = 4  # measured proposals in a row before a random unmeasured one is drawn


def _optuna() -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@dataclass
class Proposal:
    lane: str
    config: Config
    trial: Any = None  # the sampler's trial, when the sampler proposed it

    @property
    def key(self) -> tuple[str, str]:
        return self.lane, self.config.key


def _params(lane: str, config: Config) -> dict[str, Any]:
    return {"lane": lane, **{f"{lane}.{k}": v for k, v in config.items}}


def _distributions(p: Plan, lane: str) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution

    d = {"lane": CategoricalDistribution(sorted(p.lanes))}
    for t in p.spaces[lane].tunables:
        d[f"{lane}.{t.name}"] = CategoricalDistribution(t.choices)
    return d


def _score(r: Result, budget: float) -> tuple[float, float]:
    """A result's trial value (latency ms, inf when untimed) and accuracy constraint."""
    err = finite(r.rel_error)
    return (math.inf if r.latency is None else r.latency * 1e3,
            1.0 if err is None else err - budget)


def frozen_trial(p: Plan, r: Result, budget: float) -> Any | None:
    """A recorded result as a finished trial (None: the space cannot express its config)."""
    if r.lane not in p.spaces:
        return None
    choices = {t.name: t.choices for t in p.spaces[r.lane].tunables}
    values = r.config.as_dict()
    if values.keys() != choices.keys() or any(v not in choices[k] for k, v in values.items()):
        return None
    value, constraint = _score(r, budget)
    return _optuna().trial.create_trial(
        params=_params(r.lane, r.config), distributions=_distributions(p, r.lane), value=value,
        constraints={"accuracy": constraint}, user_attrs={"candidate": r.candidate_id})


class Search:
    def __init__(self, p: Plan, sampler: str, seed: int | None, budget: float) -> None:
        self.p, self.sampler, self.seed, self.budget = p, sampler, seed, budget
        self.rng = random.Random(seed)
        self.in_flight: set[tuple[str, str]] = set()
        self.study: Any = None
        by_size = sorted(p.lanes, key=lambda n: (p.sizes.get(n) or math.inf, n))
        self.queue = [(r.lane, r.config) for r in p.retry]  # (failed for the environment)
        self.queue += [(n, p.spaces[n].default) for n in by_size]
        if p.listed:
            rest = [(n, c) for n in p.lanes for c in p.spaces[n].configs()]
            self.rng.shuffle(rest)
            self.queue += rest

    def _free(self, key: tuple[str, str]) -> bool:
        return key not in self.p.measured and key not in self.in_flight

    def propose(self, n: int) -> list[Proposal]:
        """Up to `n` candidates neither measured nor in flight, that the lanes' rules admit
        (with any rule breakers the sampler proposed on the way: they are recorded as
        invalid, never built, and do not count)."""
        out: list[Proposal] = []
        valid = 0
        for _ in range(100 * n):
            if valid == n or self.p.needed - len(self.in_flight) <= 0:
                break
            nxt = self._next()
            if nxt is None:
                break
            self.in_flight.add(nxt.key)
            out.append(nxt)
            valid += self.p.spaces[nxt.lane].violation(nxt.config) is None
        return out

    def _next(self) -> Proposal | None:
        while self.queue:
            lane, config = self.queue.pop(0)
            if self._free((lane, config.key)):
                return Proposal(lane, config)
        if self.p.listed:
            return None
        study = self._study()
        for _ in range(DUPES_BEFORE_DRAW):
            trial = study.ask()
            proposal = self._suggested(trial)
            if self._free(proposal.key):
                return proposal
            known = self.p.measured.get(proposal.key)
            if known is not None:  # a repeat: told what it measured, as Optuna users do
                self._tell(trial, known)
            else:
                study.tell(trial, state=_optuna().trial.TrialState.FAIL)
        drawn = self._draw()
        if drawn is None:
            return None
        study.enqueue_trial(_params(*drawn))
        return self._suggested(study.ask())

    def _suggested(self, trial: Any) -> Proposal:
        lane = trial.suggest_categorical("lane", sorted(self.p.lanes))
        values = {t.name: trial.suggest_categorical(f"{lane}.{t.name}", t.choices)
                  for t in self.p.spaces[lane].tunables}
        return Proposal(lane, Config.of(values), trial)

    def _draw(self) -> tuple[str, Config] | None:
        """A random candidate neither measured nor in flight that the rules admit."""
        lanes = sorted(self.p.lanes)
        for _ in range(1000):
            lane = self.rng.choice(lanes)
            space = self.p.spaces[lane]
            config = Config.of({t.name: self.rng.choice(t.choices) for t in space.tunables})
            if self._free((lane, config.key)) and space.violation(config) is None:
                return lane, config
        return None

    def _study(self) -> Any:
        if self.study is None:
            optuna = _optuna()
            self.study = optuna.create_study(sampler=make_sampler(self.sampler, self.seed),
                                             direction="minimize")
            trials = [t for r in self.p.measured.values()
                      if (t := frozen_trial(self.p, r, self.budget)) is not None]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.study.add_trials(trials)
        return self.study

    def _tell(self, trial: Any, r: Result) -> None:
        value, constraint = _score(r, self.budget)
        trial.set_constraint("accuracy", constraint)
        trial.set_user_attr("candidate", r.candidate_id)
        self.study.tell(trial, value)

    def told(self, proposal: Proposal, r: Result) -> None:
        """Its result is recorded: the sampler learns it."""
        self.in_flight.discard(proposal.key)
        self.p.measured[proposal.key] = r
        if proposal.trial is not None:
            self._tell(proposal.trial, r)
        elif self.study is not None:
            t = frozen_trial(self.p, r, self.budget)
            if t is not None:
                self.study.add_trial(t)
