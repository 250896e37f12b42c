"""The samplers `--sampler` names, built lazily so `arbiter --help` never imports Optuna."""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from typing import Any

from ._errors import ArbiterError

__all__ = ["ATTR", "DEFAULT_SAMPLER", "SAMPLERS", "check_sampler", "constraint_of",
           "make_sampler"]

ATTR = "arbiter"  # trial user attr: candidate id, status, rel_error, constraint


def constraint_of(trial: Any) -> tuple[float]:
    """The accuracy constraint (`rel_error - budget <= 0`) constraint-aware samplers read."""
    return (float(trial.user_attrs.get(ATTR, {}).get("constraint", 1.0)),)


def _tpe(seed: int | None, **kw: Any) -> Any:
    from optuna.samplers import TPESampler

    # constant_liar: the next candidate is asked while the current one is in the worker
    return TPESampler(seed=seed, constraints_func=constraint_of, constant_liar=True, **kw)


def _gp(seed: int | None) -> Any:
    from optuna.samplers import GPSampler

    return GPSampler(seed=seed, constraints_func=constraint_of)


def _random(seed: int | None) -> Any:
    from optuna.samplers import RandomSampler

    return RandomSampler(seed=seed)


# name -> factory(seed)
SAMPLERS: dict[str, Callable[[int | None], Any]] = {
    # default by measurement (BENCHMARKS.md, "Arbiter overhead and samplers")
    "tpe": lambda s: _tpe(s, multivariate=True, group=True, n_startup_trials=10),
    "tpe-startup5": lambda s: _tpe(s, multivariate=True, group=True, n_startup_trials=5),
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
