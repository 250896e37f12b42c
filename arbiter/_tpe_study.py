"""The TPE samplers' study: asks and tells on a plain list of trials, with Optuna 5's TPE
arithmetic for categorical parameters.

Asked through `Study.ask` and `Trial.suggest_categorical`, Optuna's TPESampler spent more of
an ask outside the sampling than in it: trial copies, storage bookkeeping, distribution checks
for every parameter, the search-space groups recomputed from every trial, and both Parzen
estimators rebuilt from scratch. The search asks ~2 times a measured candidate, between a
candidate's check and its timing. Our spaces are categorical only and the sampler's trials
live in one process, so this study keeps what TPE reads of each trial (its parameters, value
and accuracy constraint) and proposes as `TPESampler(multivariate=..., group=...,
constant_liar=True, constraints_func=constraint_of)` does on an Optuna study: the same random
draws in the same order, hence the same proposals for the same seed (tests/test_samplers.py,
where Optuna 5 is installed; this study does not use Optuna's sampler, so another Optuna
changes nothing here). The study in the database, for the dashboard, is still Optuna's
(`_studies`).
"""

from __future__ import annotations

import bisect
import functools
import math
from typing import Any

import numpy as np

from ._samplers import ATTR

__all__ = ["COMPLETE", "FAIL", "FOLLOWS", "RUNNING", "TPEStudy", "WAITING"]

FOLLOWS = "5."  # the Optuna releases whose TPESampler this proposes as
COMPLETE, FAIL, RUNNING, WAITING = "COMPLETE", "FAIL", "RUNNING", "WAITING"

Choices = tuple[Any, ...]


class Trial:
    """One trial: the parts of Optuna's `Trial` the search uses."""

    def __init__(self, study: TPEStudy, number: int, state: str = RUNNING,
                 fixed: dict[str, Any] | None = None) -> None:
        self.study, self.number, self.fixed = study, number, fixed
        self.state = state  # set through the study (`_mark`), which keeps its arrays
        self.params: dict[str, Any] = {}
        self.choices: dict[str, Choices] = {}
        self.user_attrs: dict[str, Any] = {}
        self.groups: list[dict[str, Choices]] = []  # the relative search space at the ask
        self.relative: dict[str, Any] | None = None  # sampled at the first suggest needing it
        # the study's version and the numbers of its good and bad trials then (the same for
        # every group)
        self.split: tuple[int, tuple[np.ndarray, np.ndarray]] | None = None

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        return self.study._suggest(self, name, tuple(choices))

    def set_user_attr(self, key: str, value: Any) -> None:
        self.user_attrs[key] = value

    @property
    def distributions(self) -> dict[str, Any]:
        from optuna.distributions import CategoricalDistribution

        return {n: CategoricalDistribution(c) for n, c in self.choices.items()}


class TPEStudy:
    """A minimizing study of categorical parameters with TPE's proposals (see the module).

    `group` needs `multivariate`, as in Optuna; `multivariate` without `group` is not
    supported (our spaces are conditional: Optuna falls back to independent sampling there).
    """

    def __init__(self, seed: int | None = None, *, multivariate: bool = False,
                 group: bool = False, n_startup_trials: int = 10,
                 n_ei_candidates: int = 24, prior_weight: float = 1.0) -> None:
        if multivariate != group:
            raise ValueError("TPEStudy samples grouped multivariate TPE or independent TPE")
        self.multivariate = multivariate
        self.n_startup_trials, self.n_ei_candidates = n_startup_trials, n_ei_candidates
        self.prior_weight = prior_weight
        self.trials: list[Trial] = []
        # for the split: the finished trials as TPE ranks them (`_rank`), best first, and
        # by trial number, whether TPE sees it (finished or running)
        self._ranked: list[tuple[bool, float, int]] = []
        self._seen = np.zeros(0, dtype=bool)
        self._waiting: list[int] = []  # enqueued, oldest first
        # a group's names -> each finished trial's indices of its choices (-1: not in the
        # group, -2: not worked out yet), by trial number
        self._codes: dict[tuple[str, ...], np.ndarray] = {}
        self._tpe_rng = np.random.RandomState(seed)  # TPESampler's own draws
        self._random_rng = np.random.RandomState(seed)  # its RandomSampler's (the start)
        self._version = 0  # changes whenever a trial does
        self._groups: list[dict[str, Choices]] = []  # Optuna's group decomposition
        self._ungrouped: list[int] = []  # the trials finished since it last grew
        self._index_of: dict[tuple[str, Choices], dict[Any, int]] = {}
        # a group's names -> (the good trials' numbers, their estimator)
        self._good: dict[tuple[str, ...], tuple[tuple[int, ...], _Mixture]] = {}

    # the study's verbs -------------------------------------------------------------------

    def ask(self) -> Trial:
        """The oldest enqueued trial, else a new one; its search space is fixed now."""
        trial = self.trials[self._waiting.pop(0)] if self._waiting else self._new()
        self._mark(trial, RUNNING)
        if self.multivariate:
            trial.groups = self._grown()
        return trial

    def enqueue_trial(self, params: dict[str, Any], skip_if_exists: bool = False) -> None:
        t = self._new(WAITING)
        t.fixed = dict(params)
        self._waiting.append(t.number)

    def tell(self, trial: Trial, value: float | None = None, state: str | None = None) -> None:
        if trial.state != RUNNING:
            raise ValueError(f"trial {trial.number} is {trial.state}, not running")
        if state == FAIL or value is None or math.isnan(value):
            self._mark(trial, FAIL)
            return
        constraint = float(trial.user_attrs.get(ATTR, {}).get("constraint", 1.0))
        self._finish(trial, float(value), constraint)

    def add_trial(self, frozen: Any) -> None:
        """A finished Optuna trial (`_study_rows.Finished.frozen`) as one of this study's."""
        t = self._new()
        t.params = dict(frozen.params)
        t.choices = {n: tuple(d.choices) for n, d in frozen.distributions.items()}
        t.user_attrs = dict(frozen.user_attrs)
        self._finish(t, float(frozen.value), float(frozen.system_attrs["constraints"][0]))

    def drawing_at_random(self, finishing: int = 0) -> bool:
        """Are its proposals still random draws (too few finished trials), and would they
        be with `finishing` more? Such a proposal does not depend on any result."""
        return len(self._ranked) + finishing < self.n_startup_trials

    def good_now(self, trial: Trial,
                 assume: dict[int, tuple[float, float]] | None = None) -> set[int] | None:
        """The numbers of the trials a proposal for `trial` would now draw from (TPE's good
        ones); with `assume`, as if these running trials had finished with these
        (infeasibility, value). None: too few have finished, it would be drawn at random."""
        if len(self._ranked) + len(assume or {}) < self.n_startup_trials:
            return None
        return set(self._split(trial, assume)[0].tolist())

    # proposals ---------------------------------------------------------------------------

    def _suggest(self, trial: Trial, name: str, choices: Choices) -> Any:
        if name in trial.params:
            return trial.params[name]
        if trial.fixed is not None and name in trial.fixed:
            value = trial.fixed[name]
        elif len(choices) == 1:
            value = choices[0]
        else:
            relative = self._relative(trial)
            value = relative[name] if name in relative else self._independent(
                trial, name, choices)
        self._index(name, choices, value)  # raises ValueError, as Optuna, if not a choice
        trial.params[name], trial.choices[name] = value, choices
        return value

    def _relative(self, trial: Trial) -> dict[str, Any]:
        """Every group sampled at once, at the first parameter that needs it (Optuna's
        `relative_params`): kept on the trial, so a running trial's whole proposal is what
        the constant liar sees of it."""
        if trial.relative is None:
            params: dict[str, Any] = {}
            if len(self._ranked) >= self.n_startup_trials:
                for group in trial.groups:
                    space = {n: c for n, c in sorted(group.items()) if len(c) > 1}
                    if space:
                        params.update(self._sample(trial, space))
            trial.relative = params
        return trial.relative

    def _independent(self, trial: Trial, name: str, choices: Choices) -> Any:
        if len(self._ranked) < self.n_startup_trials:
            # RandomSampler: a uniform draw per choice (its one-hot encoding), the largest wins
            return choices[int(self._random_rng.uniform(np.zeros(len(choices)),
                                                        np.ones(len(choices))).argmax())]
        return self._sample(trial, {name: choices})[name]

    def _sample(self, trial: Trial, space: dict[str, Choices]) -> dict[str, Any]:
        """`TPESampler._sample` for categorical parameters: `n_ei_candidates` drawn from the
        good trials' mixture, the one most likely under it relative to the bad trials'."""
        if trial.split is None or trial.split[0] != self._version:
            trial.split = (self._version, self._split(trial))
        below, above = trial.split[1]
        names = tuple(space)
        good = self._good.get(names)
        numbers = tuple(below.tolist())
        if good is None or good[0] != numbers:
            good = self._good[names] = (numbers, self._estimator(below, space))
        mixture = good[1]
        bad = self._estimator(above, space)
        rng, size = self._tpe_rng, self.n_ei_candidates
        # `rng.choice(p=weights)`'s arithmetic and draws, without its checks of `p`
        active = mixture.cdf.searchsorted(rng.random_sample(size), side="right")
        quantiles = rng.random_sample((len(names), size))  # the draws of rand(size) each
        # Optuna's argmax over every candidate picks the first drawn of the most likely, as
        # this one over the distinct ones in the order drawn (most are drawn more than once)
        distinct = list(dict.fromkeys(map(tuple, mixture.sample(active, quantiles).tolist())))
        logs = mixture.remembered_log_pdf(distinct) - bad.log_pdf(np.array(distinct))
        best = distinct[int(np.argmax(logs))]
        return {name: space[name][i] for name, i in zip(names, best)}

    def _split(self, trial: Trial, assume: dict[int, tuple[float, float]] | None = None,
               ) -> tuple[np.ndarray, np.ndarray]:
        """TPE's split, as trial numbers in order: the good trials (the best ranked finished
        ones) and the rest; running trials (the constant liar: not `trial`) among the rest,
        those in `assume` as if finished with these (infeasibility, value)."""
        ranked, seen = self._ranked, self._seen.copy()
        seen[trial.number] = False
        assumed = {n: a for n, a in (assume or {}).items() if 0 <= n < len(seen) and seen[n]}
        if assumed or trial.state == COMPLETE:
            ranked = [r for r in ranked if r[2] not in assumed and r[2] != trial.number]
            for n, (infeasibility, value) in assumed.items():
                bisect.insort(ranked, _rank(n, infeasibility, value))
        below = np.array(sorted([r[2] for r in ranked[:_gamma(len(ranked))]]), dtype=np.intp)
        seen[below] = False
        return below, np.flatnonzero(seen)

    def _estimator(self, numbers: np.ndarray, space: dict[str, Choices]) -> _Mixture:
        """`_ParzenEstimator` of categorical parameters, of these trials (in number order):
        their kernels' kinds (`_Mixture`)."""
        names = tuple(space)
        table = self._codes.get(names)
        if table is None or len(table) < len(self.trials):
            grown = np.full((2 * len(self.trials) + 16, len(names)), -2, dtype=np.int64)
            if table is not None:
                grown[:len(table)] = table
            table = self._codes[names] = grown
        rows = table.take(numbers, axis=0)
        for j in np.flatnonzero(rows[:, 0] == -2):
            t = self.trials[numbers[j]]
            # a running trial is seen through its whole sampled proposal, where it has one,
            # with what it was given or drew on its own over it (Optuna's `_get_params`)
            params = ({**t.relative, **t.params} if t.state == RUNNING and t.relative
                      else t.params)
            rows[j] = ([self._index(n, space[n], params[n]) for n in space]
                       if all(n in params for n in space) else -1)
            if t.state == COMPLETE:  # never changes again
                table[t.number] = rows[j]
        observed = rows[rows[:, 0] >= 0]
        sizes = [len(c) for c in space.values()]
        kinds = np.concatenate([observed, [sizes]]).T  # the prior's kinds last
        return _Mixture(len(observed), kinds, sizes, self.prior_weight)

    # bookkeeping -------------------------------------------------------------------------

    def _new(self, state: str = RUNNING) -> Trial:
        t = Trial(self, len(self.trials), state)
        self.trials.append(t)
        self._seen = np.append(self._seen, False)
        self._mark(t, state)
        return t

    def _mark(self, trial: Trial, state: str) -> None:
        trial.state = state
        self._seen[trial.number] = state in (RUNNING, COMPLETE)
        self._version += 1

    def _finish(self, trial: Trial, value: float, constraint: float) -> None:
        self._mark(trial, COMPLETE)
        # the accuracy constraint's violation (0: within budget)
        bisect.insort(self._ranked, _rank(trial.number, max(0.0, constraint), value))
        if self.multivariate:
            self._ungrouped.append(trial.number)

    def _grown(self) -> list[dict[str, Choices]]:
        """The group decomposition of the finished trials' spaces (Optuna's
        `_GroupDecomposedSearchSpace`), grown by the trials finished since the last ask, in
        number order: adding a trial again never changes it, so this equals Optuna's
        decomposition rebuilt from every trial."""
        for number in sorted(self._ungrouped):
            self._groups = _decomposed(self._groups, self.trials[number].choices)
        self._ungrouped.clear()
        return self._groups

    def _index(self, name: str, choices: Choices, value: Any) -> int:
        index = self._index_of.get((name, choices))
        if index is None:
            index = self._index_of[(name, choices)] = {}
            for i, c in enumerate(choices):
                index.setdefault(c, i)
        try:
            return index[value]
        except (KeyError, TypeError):
            raise ValueError(f"{value!r} is not one of {name}'s choices {choices!r}") from None


def _decomposed(groups: list[dict[str, Choices]],
                space: dict[str, Choices]) -> list[dict[str, Choices]]:
    """The groups with one trial's space added: each group split into the part inside the
    space and the part outside it, then what is new, empty groups left out."""
    left = set(space)
    out: list[dict[str, Choices]] = []
    for g in groups:
        keys = set(g)
        out.append({n: g[n] for n in keys & left})
        out.append({n: g[n] for n in keys - left})
        left -= keys
    out.append({n: space[n] for n in left})
    return [g for g in out if g]


def _rank(number: int, infeasibility: float, value: float) -> tuple[bool, float, int]:
    """A finished trial's place in TPE's order: the feasible ones by value, then the others
    by infeasibility; ties in number order (Optuna's stable sorts of trials in number
    order)."""
    return (infeasibility > 0, infeasibility if infeasibility > 0 else value, number)


def _gamma(n: int) -> int:
    """How many of `n` finished trials are the good ones (TPE's default)."""
    return min(math.ceil(0.1 * n), 25)


def _weights(n: int) -> np.ndarray:
    """TPE's default weights of `n` trials in number order: the last 25 count fully, older
    ones less and less."""
    if n < 25:
        return np.ones(n)
    return np.concatenate([np.linspace(1.0 / n, 1.0, num=n - 25), np.ones(25)])


@functools.lru_cache(maxsize=256)
def _mixture_weights(n: int, prior_weight: float) -> tuple[np.ndarray, np.ndarray]:
    """The weights of a mixture of `n` observations' kernels and the prior's, as the
    cumulative distribution a kernel is drawn from and as logarithms."""
    weights = np.append(_weights(n)[:n], [prior_weight]) if n else np.array([1.0])
    weights /= weights.sum()
    cdf = weights.cumsum()
    cdf /= cdf[-1]
    with np.errstate(divide="ignore"):
        return _read_only(cdf), _read_only(np.log(weights))


@functools.lru_cache(maxsize=256)
def _kernels(n: int, k: int, prior_weight: float) -> tuple[np.ndarray, np.ndarray]:
    """The kernels of a parameter of `k` choices in a mixture of `n` observations, one row
    per kind (row c: an observation of choice c; row k: the prior), as cumulative
    probabilities (the last one 1: Optuna asserts it is close to 1, then sets it) and as
    logarithms. Optuna works out one row per kernel with the same operations; rows of one
    kind are equal."""
    if n == 0:
        w = np.full((k + 1, k), fill_value=1.0 / k)
    else:
        w = np.full((k + 1, k), fill_value=prior_weight / (n + 1))
        w[np.arange(k), np.arange(k)] += 1
        sums = w.sum(axis=1, keepdims=True)
        w /= np.where(sums == 0, 1, sums)
    cum = w.cumsum(axis=1)
    cum[:, -1] = 1
    with np.errstate(divide="ignore"):
        return _read_only(cum), _read_only(np.log(w))


def _read_only(a: np.ndarray) -> np.ndarray:
    """`a`, read-only: the cached arrays are shared by every estimator."""
    a.flags.writeable = False
    return a


class _Mixture:
    """A Parzen estimator of categorical parameters (`_MixtureOfProductDistribution`): per
    parameter, each kernel's kind (the observed choice's index; the prior, last, has the
    number of choices), whose probabilities `_kernels` keeps."""

    def __init__(self, n: int, kinds: np.ndarray, sizes: list[int],
                 prior_weight: float) -> None:
        self.cdf, self.log_weights = _mixture_weights(n, prior_weight)
        self.kinds = kinds  # one row per parameter
        self.kernels = [_kernels(n, k, prior_weight) for k in sizes]
        self._known: dict[tuple[int, ...], float] = {}  # candidate -> its log density

    def sample(self, active: np.ndarray, quantiles: np.ndarray) -> np.ndarray:
        """The choices' indices drawn from the kernels `active`, one quantile each
        (`_MixtureOfProductDistribution.sample`: per parameter, how many of the kernel's
        cumulative probabilities are below the quantile)."""
        cums = self._cums.take(active, axis=1)
        return (cums < quantiles[:, :, np.newaxis]).sum(axis=-1).T

    def remembered_log_pdf(self, candidates: list[tuple[int, ...]]) -> np.ndarray:
        """`log_pdf` of these candidates (their choices' indices), each worked out once per
        estimator (a good one is kept across asks)."""
        new = [c for c in candidates if c not in self._known]
        if new:
            self._known.update(zip(new, self.log_pdf(np.array(new)).tolist()))
        return np.array([self._known[c] for c in candidates])

    def log_pdf(self, x: np.ndarray) -> np.ndarray:
        """`_MixtureOfProductDistribution.log_pdf`, the same operations in the same order:
        row by row, so a candidate's value does not depend on the others'."""
        logs = np.zeros((len(x), len(self.log_weights)), dtype=np.float64)
        for i, lw in enumerate(self._logs):
            logs += lw.take(x[:, i], axis=1).T
        logs += self.log_weights[np.newaxis]
        top = logs.max(axis=1)
        top[top == -np.inf] = 0
        with np.errstate(divide="ignore"):
            return np.asarray(np.log(np.exp(logs - top[:, None]).sum(axis=1)) + top)

    @functools.cached_property
    def _cums(self) -> np.ndarray:
        """Per parameter, each kernel's cumulative probabilities: one table, padded with 1
        (never below a quantile) to the most choices."""
        most = max(cum.shape[1] for cum, _ in self.kernels)
        table = np.ones((len(self.kernels), len(self.log_weights), most))
        for padded, kinds, (cum, _) in zip(table, self.kinds, self.kernels):
            padded[:, :cum.shape[1]] = cum.take(kinds, axis=0)
        return table

    @functools.cached_property
    def _logs(self) -> list[np.ndarray]:
        """Per parameter, each kernel's log probabilities."""
        return [log_p.take(kinds, axis=0) for (_, log_p), kinds in zip(self.kernels, self.kinds)]
