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


def _optuna(sampler: str, **settings: Any) -> Callable[[int | None], Any]:
    def make(seed: int | None) -> Any:
        import optuna.samplers

        return getattr(optuna.samplers, sampler)(seed=seed, **settings)
    return make


_TPE = {"multivariate": True, "group": True, "constant_liar": True}
# name -> factory(seed); `tpe` is the default by measurement (BENCHMARKS.md)
SAMPLERS: dict[str, Callable[[int | None], Any]] = {
    "tpe": _optuna("TPESampler", **_TPE, n_startup_trials=10),
    "tpe-startup5": _optuna("TPESampler", **_TPE, n_startup_trials=5),
    "tpe-independent": _optuna("TPESampler", constant_liar=True, n_startup_trials=5),
    "gp": _optuna("GPSampler"),
    "random": _optuna("RandomSampler"),
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
