"""The sampled path's proposals: the next unmeasured candidate, asked one trial ahead.

Lane is a categorical parameter and each lane's tunables are asked only under it
(define-by-run), named `<lane>.<tunable>`. The next candidate is asked while the current one
is in the worker, with the current one pending in the study (TPE's constant liar keeps the
sampler from proposing it again), so the sampler's time stays off the path between trials.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any, cast

from ._plan import Plan
from ._records import Result
from ._samplers import ATTR
from ._studies import objective, params, scored
from ._tpe_study import FAIL, TPEStudy
from ._values import Config, Measurement, Status

__all__ = ["DUPES_BEFORE_ENUM", "Asker", "pool", "unmeasured"]

DUPES_BEFORE_ENUM = 8  # consecutive already-measured proposals before we pick one ourselves


class _NotNow(Exception):
    """The next ask would depend on a result not recorded yet."""


def pool(p: Plan, rng: random.Random) -> list[tuple[str, Config]]:
    """Every listable candidate, in a seeded random order."""
    out = [(lane, c) for lane, space in p.spaces.items() if p.sizes[lane] is not None
           for c in space.configs()]
    rng.shuffle(out)
    return out


def unmeasured(p: Plan, pool: list[tuple[str, Config]], rng: random.Random,
               busy: tuple[str, str] | None = None,
               draw: bool = True) -> tuple[str, Config] | None:
    """The first pool entry neither measured nor in flight (random draws for spaces too big
    to list, unless `draw` is False: a look ahead must not move the generator).

    Recomputed on every call, not consumed: the study may hand back an older queued trial
    (left by a killed sweep) instead of the one just enqueued, and the pick must survive that.
    """
    for lane, cfg in pool:
        if (lane, cfg.key) not in p.measured and (lane, cfg.key) != busy:
            return lane, cfg
    huge = sorted(ln for ln in p.spaces if p.sizes[ln] is None)
    for _ in range(1000 if huge and draw else 0):
        lane = rng.choice(huge)
        cfg = Config.of({t.name: rng.choice(t.choices) for t in p.spaces[lane].tunables})
        if ((lane, cfg.key) not in p.measured and (lane, cfg.key) != busy
                and p.spaces[lane].violation(cfg) is None):
            return lane, cfg
    return None


def _tell(study: Any, trial: Any, value: float | None = None, failed: bool = False) -> None:
    """`study.tell`; on an Optuna study without the deep copy of the trial it returns (~0.1 ms
    a tell, two tells a candidate; nothing here reads it), where Optuna has the function it
    calls."""
    if isinstance(study, TPEStudy):
        study.tell(trial, value, FAIL if failed else None)
        return
    from optuna.trial import TrialState

    state = TrialState.FAIL if failed else None
    try:
        from optuna.study._tell import _tell_with_warning
    except ImportError:
        study.tell(trial, value, state)
        return
    _tell_with_warning(study, trial, value_or_values=value, state=state)


def _random_sampler(study: Any) -> bool:
    from optuna.samplers import RandomSampler

    return isinstance(getattr(study, "sampler", None), RandomSampler)


def _suggest(trial: Any, p: Plan) -> tuple[str, Config]:
    lane = trial.suggest_categorical("lane", sorted(p.lanes))
    values = {t.name: trial.suggest_categorical(f"{lane}.{t.name}", t.choices)
              for t in p.spaces[lane].tunables}
    return lane, Config.of(values)


class Asker:
    """Proposals for one region's sampled sweep.

    `propose(busy)` asks until the sampler names a candidate that is neither measured nor the
    one in flight (`busy`): a repeat of a measured one is told its recorded result at once; a
    repeat of the one in flight waits for its result; a config the space's rules refuse is
    recorded through `refuse` (no build, no run) and told at once, so none of these leave the
    worker's window. After a run of repeats or refused configs it hands the sampler an
    unmeasured candidate from the pool itself. `mirror` gets every newly recorded trial.
    """

    def __init__(self, study: Any, p: Plan, pool: list[tuple[str, Config]],
                 rng: random.Random, budget: float,
                 refuse: Callable[[str, Config], Result] | None = None,
                 mirror: Callable[[Any, float, dict[str, Any]], None] | None = None) -> None:
        self.study, self.p, self.pool, self.rng, self.budget = study, p, pool, rng, budget
        self.refuse, self.mirror = refuse, mirror
        self.dupes = self.asks = 0
        self.limit = 5 * p.target + 100
        self.waiting: list[Any] = []  # asked for the candidate in flight
        self._ahead: list[tuple[Any, str, Config] | None] = []
        self._default: list[Any] = []  # the trial of the last default, asked ahead of it

    def propose(self, busy: tuple[str, str] | None = None,
                random_only: Callable[[], bool] | None = None,
                ) -> tuple[Any, str, Config] | None:
        """With `random_only`: raises `_NotNow` before an ask it says would not be a random
        draw (that ask and what follows it are left to a later call)."""
        while self.asks < self.limit:
            if random_only is not None and not random_only():
                raise _NotNow
            self.asks += 1
            if self.dupes >= DUPES_BEFORE_ENUM:
                pick = unmeasured(self.p, self.pool, self.rng, busy)
                if pick is None:
                    return None
                self.study.enqueue_trial(params(*pick), skip_if_exists=False)
            trial = self.study.ask()
            lane, cfg = _suggest(trial, self.p)
            key = (lane, cfg.key)
            known = self.p.measured.get(key)
            if key == busy:
                self.waiting.append(trial)
            elif known is not None:
                self._tell(trial, known)
            elif self.refuse is not None and self.p.spaces[lane].violation(cfg) is not None:
                self._record(trial, self.refuse(lane, cfg))
            else:
                self.dupes = 0
                return trial, lane, cfg
            self.dupes += 1
        return None

    def ask_ahead(self, busy: tuple[str, str],
                  random_only: Callable[[], bool] | None = None) -> tuple[str, Config] | None:
        """While `busy` is in the worker (its result not recorded yet): ask for the one after
        it, if one more will be needed; `next` hands it over. Returns its (lane, config).
        (`random_only`: as `propose`'s; nothing is handed over when it stops the asks.)"""
        if self.p.needed > 1:
            self._ahead = [self.propose(busy, random_only)]
            if self._ahead[0] is not None:
                return self._ahead[0][1], self._ahead[0][2]
        return None

    def ask_ahead_of_default(self, lane: str, default: Config) -> tuple[str, Config] | None:
        """`ask_ahead` while the region's last lane default (measured without the sampler) is
        in the worker, where no result can change the proposal: the sampler draws at random
        still, and would with that default's result too. Else None: the first proposal is
        asked once that result is recorded (`told_default`).

        The default gets its trial first, finished by `told_default`: the study's trials are
        then numbered as when the default was recorded before the first ask (TPE lays out
        its estimator in number order)."""
        random_draw = getattr(self.study, "drawing_at_random", None)
        if random_draw is None or self.p.needed <= 1 or not random_draw(finishing=1):
            return None
        self.study.enqueue_trial(params(lane, default), skip_if_exists=False)
        self._default = [self.study.ask()]
        _suggest(self._default[0], self.p)
        # after that result, each ask would see it, and each repeat of the default (told at
        # once then, held in `waiting` now), as one more finished trial
        try:
            return self.ask_ahead((lane, default.key),
                                  lambda: random_draw(finishing=1 + len(self.waiting)))
        except _NotNow:
            return None  # `next` asks on, once that result is recorded

    def told_default(self, r: Result) -> bool:
        """The last default's result, for its trial and the repeats of it asked meanwhile.
        False: it has no trial here (none was asked ahead of it): the caller adds it."""
        default, self._default = self._default, []
        if default:
            self._tell(default[0], r)
        self.told_waiting(r)
        return bool(default)

    def asked_ahead(self) -> bool:
        """Is a proposal asked ahead, for `next` to hand over?"""
        return bool(self._ahead) and self._ahead[0] is not None

    def next(self) -> tuple[Any, str, Config] | None:
        """The proposal asked ahead, else one asked now (the last one went to no worker, or
        it was not yet clear one more was needed); None when done."""
        ahead, self._ahead = self._ahead, []
        if ahead:
            return ahead[0]
        return self.propose() if self.p.needed > 0 else None

    def _tell(self, trial: Any, r: Result) -> tuple[float, dict[str, Any]]:
        value, attrs = objective(r, self.budget)
        trial.set_user_attr(ATTR, attrs)
        _tell(self.study, trial, value)
        return value, attrs

    def _record(self, trial: Any, r: Result) -> None:
        value, attrs = self._tell(trial, r)
        if self.mirror is not None:
            self.mirror(trial, value, attrs)

    def told(self, trial: Any, r: Result) -> None:
        """The measured result of a proposal (and of any repeat asked while it was in flight).

        The proposal asked ahead assumed this one was bad (the constant liar). Most results
        are, and the sampler's split into good and bad trials, hence its proposal, is what it
        would have been; a result among the best few changes that split, so the proposal asked
        without it is dropped (told failed: samplers skip those) and the next one is asked
        knowing it. Asking ahead then costs no trials to find a good config (BENCHMARKS.md).
        """
        if r.status is Status.INVALID:  # refused configs teach the sampler little
            self.dupes += 1
        self._record(trial, r)
        told = [trial, *self.waiting]
        self.told_waiting(r)
        if self._ahead and self._ahead[0] is not None:
            good = self._good({t.number for t in told})
            if good is None:
                good = self._among_best(r.median if r.fits(self.budget) else None)
            if good:
                _tell(self.study, self._ahead[0][0], failed=True)
                self._ahead = []

    def told_waiting(self, r: Result) -> None:
        """The result of the candidate in flight, for the repeats of it asked meanwhile."""
        for t in self.waiting:
            self._tell(t, r)
        self.waiting.clear()

    def stands(self, trial: Any, m: Measurement) -> bool:
        """Will the proposal asked ahead of `m` (`trial`'s result, not recorded yet) stand,
        so that `m` can be recorded and told later? Not when there is none, nor when `told`
        would drop it."""
        if not self._ahead:
            return False
        value, constraint = scored(m.median, m.rel_error, self.budget)
        score = (max(0.0, constraint), value)
        told = {t.number: score for t in (trial, *self.waiting)}
        good = self._good(set(told), told)
        if good is None:
            fits = m.status is Status.OK and m.median is not None
            good = self._among_best(m.median if fits else None, recorded=False)
        return not good

    def _good(self, told: set[int],
              assume: dict[int, tuple[float, float]] | None = None) -> bool | None:
        """Is one of the `told` trials among those the sampler now takes as good (those in
        `assume` taken as finished so)? Then the proposal asked ahead without it is not the
        one it would make: TPE draws from the good trials' mixture. (That set also grows by
        one trial at every tenth finished one; like the rule of thumb, this keeps the
        proposal then.) None when the sampler cannot say (a model other than our TPE).

        A random draw (the random sampler, TPE's random start) is the one asked in step,
        whatever the result: it stands, so that a seed proposes the same candidates however
        the timings come out. (Dropping such draws on the rule of thumb ended TPE's random
        start sooner, 0.45 fewer trials to a good config over 1400 seeds, but made the
        proposals follow the timing noise from the first trials on.)"""
        ahead = self._ahead[0] if self._ahead else None
        if ahead is None:
            return None
        good_now = getattr(self.study, "good_now", None)
        if good_now is None:
            return False if _random_sampler(self.study) else None
        good = good_now(ahead[0], assume)
        return False if good is None else not good.isdisjoint(told)

    def _among_best(self, median: float | None, recorded: bool = True) -> bool:
        """In TPE's "good" group: the best tenth of the timed results within budget (None: a
        result that is not one of those)."""
        if median is None:
            return False
        fit = sorted([*(cast(float, x.median) for x in self.p.measured.values()
                        if x.fits(self.budget)), *(() if recorded else (median,))])
        return median <= fit[max(1, math.ceil(0.1 * len(fit))) - 1]
