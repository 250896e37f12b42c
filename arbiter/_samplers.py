"""The samplers `--sampler` names, built lazily so `arbiter --help` never imports Optuna."""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from typing import Any

from ._errors import ArbiterError

__all__ = ["ATTR", "DEFAULT_SAMPLER", "DEFAULT_TPE", "SAMPLERS", "TPE", "check_sampler",
           "constraint_of", "make_sampler", "make_study", "optuna_tpe"]

ATTR = "arbiter"  # trial user attr: candidate id, status, rel_error, constraint


def constraint_of(trial: Any) -> tuple[float]:
    """The accuracy constraint (`rel_error - budget <= 0`) constraint-aware samplers read."""
    return (float(trial.user_attrs.get(ATTR, {}).get("constraint", 1.0)),)


def optuna_tpe(seed: int | None, **kw: Any) -> Any:
    """Optuna's TPESampler as it ships, with the accuracy constraint and the constant liar
    (the next candidate is asked while the current one is in the worker)."""
    from optuna.samplers import TPESampler

    return TPESampler(seed=seed, constraints_func=constraint_of, constant_liar=True, **kw)


def _gp(seed: int | None) -> Any:
    from optuna.samplers import GPSampler

    return GPSampler(seed=seed, constraints_func=constraint_of)


def _random(seed: int | None) -> Any:
    from optuna.samplers import RandomSampler

    return RandomSampler(seed=seed)


DEFAULT_TPE = {"multivariate": True, "group": True, "n_startup_trials": 10}  # `tpe`'s settings

# name -> the settings of Optuna's TPESampler it is (with the accuracy constraint and the
# constant liar): `make_study` asks on our own study (`_tpe_study`), which proposes the same
TPE: dict[str, dict[str, Any]] = {
    # default by measurement (BENCHMARKS.md, "Arbiter overhead and samplers")
    "tpe": DEFAULT_TPE,
    "tpe-startup5": {**DEFAULT_TPE, "n_startup_trials": 5},
    "tpe-independent": {"n_startup_trials": 5},
}
# name -> factory(seed) of the other samplers, asked on an Optuna study
OTHERS: dict[str, Callable[[int | None], Any]] = {"gp": _gp, "random": _random}
SAMPLERS = [*TPE, *OTHERS]
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
    """The Optuna sampler `name` is (the TPE ones as Optuna ships them)."""
    check_sampler(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return optuna_tpe(seed, **TPE[name]) if name in TPE else OTHERS[name](seed)
        except ImportError as e:
            raise ArbiterError(f"sampler {name!r} needs a missing package: {e}") from None


def make_study(name: str, seed: int | None) -> Any:
    """A minimizing study that asks with sampler `name`: our own for the TPE ones, else an
    in-memory Optuna study."""
    check_sampler(name)
    if name in TPE:
        from ._tpe_study import TPEStudy

        return TPEStudy(seed, **TPE[name])
    import optuna

    return optuna.create_study(sampler=make_sampler(name, seed), direction="minimize")
