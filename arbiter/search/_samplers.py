"""The samplers `--sampler` names: Optuna's own, built lazily so `arbiter --help` never imports
Optuna. The TPE ones read the accuracy constraint each trial carries (Optuna's
`Trial.set_constraint`), so over-budget candidates count as infeasible."""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from typing import Any

from .._errors import ArbiterError

__all__ = ["DEFAULT_SAMPLER", "SAMPLERS", "check_sampler", "make_sampler"]


def _tpe(**settings: Any) -> Callable[[int | None], Any]:
    def make(seed: int | None) -> Any:
        from optuna.samplers import TPESampler

        return TPESampler(seed=seed, constant_liar=True, **settings)
    return make


def _gp(seed: int | None) -> Any:
    from optuna.samplers import GPSampler

    return GPSampler(seed=seed)


def _random(seed: int | None) -> Any:
    from optuna.samplers import RandomSampler

    return RandomSampler(seed=seed)


# name -> factory(seed); `tpe` is the default by measurement (BENCHMARKS.md)
SAMPLERS: dict[str, Callable[[int | None], Any]] = {
    "tpe": _tpe(multivariate=True, group=True, n_startup_trials=10),
    "tpe-startup5": _tpe(multivariate=True, group=True, n_startup_trials=5),
    "tpe-independent": _tpe(n_startup_trials=5),
    "gp": _gp,
    "random": _random,
}
DEFAULT_SAMPLER = "tpe"
NEEDS = {"gp": "torch"}  # Optuna imports these only at a sampler's first trial


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
        warnings.simplefilter("ignore")  # `group` is experimental in Optuna
        return SAMPLERS[name](seed)
