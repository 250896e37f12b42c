"""The samplers `--sampler` names, built lazily so `arbiter --help` never imports Optuna."""

from __future__ import annotations

import contextlib
import importlib.util
import warnings
from collections.abc import Callable
from typing import Any

from ._errors import ArbiterError

__all__ = ["ATTR", "DEFAULT_SAMPLER", "DEFAULT_TPE", "SAMPLERS", "check_sampler",
           "constraint_of", "make_sampler", "optuna_tpe"]

ATTR = "arbiter"  # trial user attr: candidate id, status, rel_error, constraint


def constraint_of(trial: Any) -> tuple[float]:
    """The accuracy constraint (`rel_error - budget <= 0`) constraint-aware samplers read."""
    return (float(trial.user_attrs.get(ATTR, {}).get("constraint", 1.0)),)


def _growing_groups() -> Any:
    """Optuna's group decomposition of the search space, fed each finished trial once.

    TPE (`group=True`) recomputes it at every ask from every finished trial, then deep-copies
    it: ~0.5 ms of a ~1.3 ms ask at 40 trials, growing with the study. Adding a trial again
    never changes a decomposition that already holds it (its groups keep their order, as each
    is inside or outside that trial's parameters), so adding only the new ones gives the same
    groups in the same order, hence the same proposals (a test compares them). It leans on
    Optuna's private classes: where they differ from the ones this was written against, it
    hands the work back to Optuna's own step (as it does if this import fails)."""
    from optuna.search_space.group_decomposed import _GroupDecomposedSearchSpace, _SearchSpaceGroup
    from optuna.trial import TrialState

    class Growing(_GroupDecomposedSearchSpace):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(include_pruned=True)
            self.seen: set[int] = set()
            self.fast = True

        def calculate(self, study: Any, use_cache: bool = False) -> Any:
            if self.fast:
                try:
                    return self._grown(study)
                except (AttributeError, TypeError):
                    self.fast = False
            return super().calculate(study)

        def _grown(self, study: Any) -> Any:
            for t in study.get_trials(deepcopy=False,
                                      states=(TrialState.COMPLETE, TrialState.PRUNED)):
                if t.number not in self.seen:
                    self._search_space.add_distributions(t.distributions)
                    self.seen.add(t.number)
            # add_distributions replaces the list and never changes a group's dict in place
            groups = _SearchSpaceGroup()
            groups._search_spaces = list(self._search_space.search_spaces)
            if groups.search_spaces != self._search_space.search_spaces:
                raise TypeError("not the _SearchSpaceGroup this was written against")
            return groups

    return Growing()


def optuna_tpe(seed: int | None, cls: Any = None, **kw: Any) -> Any:
    """Optuna's TPESampler as it ships (or `cls`, a subclass), with the accuracy constraint
    and the constant liar (the next candidate is asked while the current one is in the
    worker)."""
    from optuna.samplers import TPESampler

    return (cls or TPESampler)(seed=seed, constraints_func=constraint_of, constant_liar=True,
                               **kw)


def _tpe(seed: int | None, **kw: Any) -> Any:
    """Optuna's TPE with two faster steps that propose the same: the search-space groups
    grown a trial at a time, and the sampling of categorical groups (`_tpe_step`)."""
    from ._tpe_step import categorical_tpe

    sampler = optuna_tpe(seed, categorical_tpe(), **kw)
    if getattr(sampler, "_group_decomposed_search_space", None) is not None:
        with contextlib.suppress(ImportError, AttributeError, TypeError):
            sampler._group_decomposed_search_space = _growing_groups()
    return sampler


def _gp(seed: int | None) -> Any:
    from optuna.samplers import GPSampler

    return GPSampler(seed=seed, constraints_func=constraint_of)


def _random(seed: int | None) -> Any:
    from optuna.samplers import RandomSampler

    return RandomSampler(seed=seed)


DEFAULT_TPE = {"multivariate": True, "group": True, "n_startup_trials": 10}  # `tpe`'s settings

# name -> factory(seed)
SAMPLERS: dict[str, Callable[[int | None], Any]] = {
    # default by measurement (BENCHMARKS.md, "Arbiter overhead and samplers")
    "tpe": lambda s: _tpe(s, **DEFAULT_TPE),
    "tpe-startup5": lambda s: _tpe(s, **{**DEFAULT_TPE, "n_startup_trials": 5}),
    "tpe-independent": lambda s: _tpe(s, n_startup_trials=5),
    "gp": _gp,
    "random": _random,
}
DEFAULT_SAMPLER = "tpe"
# optuna imports these only at a sampler's first trial; checked before the sweep starts
NEEDS = {"gp": "torch"}


def check_sampler(name: str) -> None:
    if name not in SAMPLERS:
        raise ArbiterError(f"unknown sampler {name!r} (known: {', '.join(SAMPLERS)})")
    need = NEEDS.get(name)
    if need is not None and importlib.util.find_spec(need) is None:
        raise ArbiterError(f"sampler {name!r} needs a missing package: "
                           f"No module named {need!r}")


def make_sampler(name: str, seed: int | None) -> Any:
    check_sampler(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return SAMPLERS[name](seed)
        except ImportError as e:
            raise ArbiterError(f"sampler {name!r} needs a missing package: {e}") from None
