"""TPE's sampling step for groups of categorical parameters, from per-trial codes kept
between asks.

At every ask and for every group of parameters, Optuna's TPESampler encodes each trial
again, scores its feasibility, splits the trials into good and bad ones and builds two Parzen
estimators, through code written for every kind of distribution. Our spaces are categorical
only. `categorical_tpe()`'s `_sample` does the same arithmetic with the same random draws in
the same order, from what it keeps per finished trial (which never changes): it proposes
exactly what Optuna's own step proposes (tests/test_samplers.py). Anything else (a numerical
parameter, several objectives, an estimator of the user's, an Optuna whose internals differ
from the 5.x ones this follows) goes to Optuna's own step.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

__all__ = ["categorical_tpe"]

FOLLOWS = "5."  # the Optuna releases whose TPESampler._sample this repeats


@cache
def categorical_tpe() -> Any:
    """TPESampler's subclass with the categorical step (made once, Optuna imported then)."""
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.samplers import TPESampler
    from optuna.samplers._tpe import sampler as tpe
    from optuna.samplers._tpe.parzen_estimator import _ParzenEstimator
    from optuna.study import StudyDirection
    from optuna.trial import TrialState

    running, complete = TrialState.RUNNING, TrialState.COMPLETE

    class CategoricalTPE(TPESampler):  # type: ignore[misc]
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.fast = optuna.__version__.startswith(FOLLOWS)
            self._scores: dict[int, tuple[float, Any]] = {}  # finished: (infeasibility, value)
            # finished: (number, the group's names) -> each one's index among its choices
            self._codes: dict[tuple[int, tuple[str, ...]], list[int]] = {}
            # the split of the ask under way, shared by its groups (None: not in an ask)
            self._ask_split: list[tuple[list[Any], list[Any]]] | None = None
            # a group's names -> (the good trials' numbers, their estimator): finished
            # trials never change, so neither does the estimator of the same ones
            self._good: dict[tuple[str, ...], tuple[tuple[int, ...], Any]] = {}

        def sample_relative(self, study: Any, trial: Any, space: dict[str, Any]) -> Any:
            # every group is sampled in this one call: the study cannot change meanwhile
            self._ask_split = []
            try:
                return super().sample_relative(study, trial, space)
            finally:
                self._ask_split = None

        def good_now(self, study: Any, trial: Any,
                     assume: dict[int, tuple[float, float]] | None = None,
                     ) -> set[int] | None:
            """The numbers of the trials a proposal for `trial` would now take as the good
            ones; with `assume`, as if these running trials had finished with these
            (infeasibility, value). None: too few have finished, it would be drawn at
            random; or this step follows another Optuna's split than its own (`fast` off)."""
            if not self.fast:
                return None
            finished = len(study._get_trials(deepcopy=False, states=(complete, TrialState.PRUNED),
                                             use_cache=False))
            if finished + len(assume or {}) < self._n_startup_trials:
                return None
            return {t.number for t in self._split(study, trial, assume)[0]}

        def _sample(self, study: Any, trial: Any, space: dict[str, Any]) -> dict[str, Any]:
            if (self.fast and len(study.directions) <= 1
                    and all(isinstance(d, CategoricalDistribution) for d in space.values())):
                try:
                    if self._parzen_estimator_cls is _ParzenEstimator:
                        return self._categorical(study, trial, space)
                except (AttributeError, TypeError):
                    self.fast = False
            return super()._sample(study, trial, space)

        def _categorical(self, study: Any, trial: Any, space: dict[str, Any]) -> dict[str, Any]:
            if self._ask_split:
                below, above = self._ask_split[0]
            else:
                below, above = self._split(study, trial)
                if self._ask_split is not None:
                    self._ask_split.append((below, above))
            names = list(space)
            good, bad = self._good_estimator(study, below, space), self._estimator(
                study, above, space)
            rng, size = self._rng.rng, self._n_ei_candidates
            weights, dists = good
            active = rng.choice(len(weights), p=weights, size=size)
            samples = np.empty((size, len(names)), dtype=float)
            for i, w in enumerate(dists):
                quantile = rng.rand(size)
                cum = np.cumsum(w[active, :], axis=-1)
                cum[:, -1] = 1  # (Optuna asserts it is close to 1 first)
                samples[:, i] = np.sum(cum < quantile[:, np.newaxis], axis=-1)
            best = int(np.argmax(_log_pdf(good, samples) - _log_pdf(bad, samples)))
            return {name: space[name].to_external_repr(samples[best, i].item())
                    for i, name in enumerate(names)}

        def _split(self, study: Any, trial: Any,
                   assume: dict[int, tuple[float, float]] | None = None,
                   ) -> tuple[list[Any], list[Any]]:
            """`tpe._split_trials`: the good trials (best values, then the least pruned,
            then the least infeasible) and the rest, running ones (the constant liar) among
            the rest (those in `assume`: as if finished, see `good_now`)."""
            assume = assume or {}
            states = (complete, TrialState.PRUNED, *((running,) if self._constant_liar else ()))
            trials = study._get_trials(deepcopy=False, states=states,
                                       use_cache=not self._constant_liar)
            if self._constant_liar:
                trials = [t for t in trials if t.number != trial.number]
            if self._gamma is None:
                self._gamma = tpe.default_gamma
            n_below = self._gamma(sum(t.state != running or t.number in assume
                                      for t in trials))
            live: list[Any] = []
            feasible: list[tuple[Any, Any]] = []
            pruned: list[Any] = []
            infeasible: list[tuple[Any, float]] = []
            for t in trials:
                seen = assume.get(t.number)
                if t.state == running and seen is None:
                    live.append(t)
                    continue
                if seen is None:
                    seen = self._scores.get(t.number)
                if seen is None:
                    seen = self._scores[t.number] = (tpe._get_infeasible_trial_score(t), t.value)
                if seen[0] > 0:
                    infeasible.append((t, seen[0]))
                elif t.state == complete or t.number in assume:
                    feasible.append((t, seen[1]))
                else:
                    pruned.append(t)
            # stable, as sorted() in Optuna
            feasible.sort(key=lambda x: x[1],
                          reverse=study.direction == StudyDirection.MAXIMIZE)
            k = min(n_below, len(feasible))
            below, above = [t for t, _ in feasible[:k]], [t for t, _ in feasible[k:]]
            n_below -= k
            pruned.sort(key=lambda t: tpe._get_pruned_trial_score(t, study))
            k = min(n_below, len(pruned))
            below += pruned[:k]
            above += pruned[k:]
            n_below -= k
            infeasible.sort(key=lambda x: x[1])
            k = min(n_below, len(infeasible))
            below += [t for t, _ in infeasible[:k]]
            above += [t for t, _ in infeasible[k:]] + live
            return sorted(below, key=_number), sorted(above, key=_number)

        def _good_estimator(self, study: Any, below: list[Any],
                            space: dict[str, Any]) -> tuple[np.ndarray, list[np.ndarray]]:
            """The good trials' estimator, kept while they stay the same (no running trial
            is ever among them)."""
            names, numbers = tuple(space), tuple(t.number for t in below)
            kept = self._good.get(names)
            if kept is None or kept[0] != numbers:
                kept = self._good[names] = (numbers, self._estimator(study, below, space))
            return kept[1]

        def _estimator(self, study: Any, trials: list[Any],
                       space: dict[str, Any]) -> tuple[np.ndarray, list[np.ndarray]]:
            """`_ParzenEstimator` of categorical parameters: the mixture's weights and, per
            parameter, each kernel's probabilities (the last kernel is the prior)."""
            rows = []
            names = tuple(space)
            for t in trials:
                if t.state == running:  # its proposal, shared through its system attrs
                    params = self._get_params(t, study)
                    if space.keys() <= params.keys():
                        rows.append([space[p].to_internal_repr(params[p]) for p in space])
                    continue
                row = self._codes.get((t.number, names))
                if row is None and space.keys() <= t.params.keys():
                    row = self._codes[(t.number, names)] = [
                        space[p].to_internal_repr(t.params[p]) for p in space]
                if row is not None:
                    rows.append(row)
            par = self._parzen_estimator_parameters
            n = len(rows)
            weights = (np.append(np.array(par.weights(n))[:n], [par.prior_weight]) if n
                       else np.array([1.0]))
            weights /= weights.sum()
            observed = np.array(rows, dtype=int).reshape(n, len(space))
            dists = []
            for i, d in enumerate(space.values()):
                choices = len(d.choices)
                if n == 0:
                    dists.append(np.full((1, choices), fill_value=1.0 / choices))
                    continue
                w = np.full((n + 1, choices), fill_value=par.prior_weight / (n + 1))
                w[np.arange(n), observed[:, i]] += 1
                sums = w.sum(axis=1, keepdims=True)
                w /= np.where(sums == 0, 1, sums)
                dists.append(w)
            return weights, dists

    return CategoricalTPE


def _number(t: Any) -> int:
    return int(t.number)


def _log_pdf(mixture: tuple[np.ndarray, list[np.ndarray]], x: np.ndarray) -> np.ndarray:
    """`_MixtureOfProductDistribution.log_pdf` for categorical parameters."""
    weights, dists = mixture
    logs = np.zeros((len(x), len(weights)), dtype=np.float64)
    for i, w in enumerate(dists):
        logs += np.log(w[:, x[:, i].astype(np.int64)].T)
    logs += np.log(weights[np.newaxis])
    top = logs.max(axis=1)
    top[np.isneginf(top)] = 0
    with np.errstate(divide="ignore"):
        return np.asarray(np.log(np.exp(logs - top[:, None]).sum(axis=1)) + top)
