"""The search: one Optuna study per (region, fingerprint, lane set), records first.

Lane is a categorical parameter and each lane's tunables are asked only under it
(define-by-run), named `<lane>.<tunable>`. The objective is the median latency in ms; the
accuracy budget is a constraint (`rel_error - budget <= 0`, kept in the trial's user attrs)
that constraint-aware samplers read back. Our `candidates` table is the source of truth: a
(lane, config) already measured on this machine is told to the study from the records and
never measured again; a space no bigger than the trial budget is enumerated, not sampled.

The sampler asks and is told on an in-memory study rebuilt from the records at the start of a
region; the study in the database (what optuna-dashboard shows) gets each measured candidate
as one finished trial, written right after its record. Asking on the database study directly
costs ~10 commits per trial (one per suggested parameter), which was most of the arbiter's
own time per trial.
"""

from __future__ import annotations

import hashlib
import math
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from ._check import fresh_seeds
from ._records import FINAL, Choice, Records, Result, ceiling_of, choose
from ._values import Config, Measurement, Space, Status
from ._worker import Worker

__all__ = ["DEFAULT_SAMPLER", "SAMPLERS", "Plan", "RegionTuning", "make_sampler", "tune_region"]

ENUMERABLE = 50_000  # larger spaces are sampled only, never listed
DUPES_BEFORE_ENUM = 8  # consecutive already-measured proposals before we pick one ourselves
FINALISTS = 3
ATTR = "arbiter"  # trial user attr: candidate id, status, rel_error, constraint


def constraint_of(trial: Any) -> tuple[float]:
    return (float(trial.user_attrs.get(ATTR, {}).get("constraint", 1.0)),)


def _tpe(seed: int | None, **kw: Any) -> Any:
    from optuna.samplers import TPESampler

    return TPESampler(seed=seed, constraints_func=constraint_of, **kw)


def _gp(seed: int | None) -> Any:
    import importlib.util

    from optuna.samplers import GPSampler

    if importlib.util.find_spec("torch") is None:  # optuna imports it only at the first trial
        raise ImportError("No module named 'torch'")

    return GPSampler(seed=seed, constraints_func=constraint_of)


def _random(seed: int | None) -> Any:
    from optuna.samplers import RandomSampler

    return RandomSampler(seed=seed)


# name -> factory(seed); built lazily so `arbiter --help` never imports optuna
SAMPLERS: dict[str, Callable[[int | None], Any]] = {
    # default by measurement (BENCHMARKS.md, "Arbiter overhead and samplers")
    "tpe": lambda s: _tpe(s, multivariate=True, group=True, n_startup_trials=10),
    "tpe-startup5": lambda s: _tpe(s, multivariate=True, group=True, n_startup_trials=5),
    "tpe-independent": lambda s: _tpe(s, n_startup_trials=5),
    "gp": _gp,
    "random": _random,
}
DEFAULT_SAMPLER = "tpe"


def make_sampler(name: str, seed: int | None) -> Any:
    from ._errors import ArbiterError

    if name not in SAMPLERS:
        raise ArbiterError(f"unknown sampler {name!r} (known: {', '.join(SAMPLERS)})")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return SAMPLERS[name](seed)
        except ImportError as e:
            raise ArbiterError(f"sampler {name!r} needs a missing package: {e}") from None


def space_size(space: Space) -> int | None:
    n = math.prod(len(t.choices) for t in space.tunables)
    return space.size() if n <= ENUMERABLE else None


@dataclass
class Plan:
    """What one region's sweep will do, decided from the records before any measurement."""

    lanes: dict[str, Any]  # name -> Lane, applicable and available
    spaces: dict[str, Space]
    total: int | None  # candidates in all spaces together; None when too many to list
    target: int  # distinct candidates to have measured when done
    measured: dict[tuple[str, str], Result] = field(default_factory=dict)
    # lane -> number of valid configs (None: too many to list); counting walks the whole space,
    # so it is done once here and read by the ordering, pool and fallback draws below
    sizes: dict[str, int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, space in self.spaces.items():
            if name not in self.sizes:
                self.sizes[name] = space_size(space)

    @property
    def needed(self) -> int:
        # a config the lane's rules (or its emitter) refuse costs no build and no run, so it
        # does not use up the trial budget; it is still recorded, so it is never asked again
        tried = sum(1 for r in self.measured.values() if r.status is not Status.INVALID)
        return max(0, self.target - tried)


@dataclass
class RegionTuning:
    region: Any
    budget: float
    new: int = 0
    reused: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    choice: Choice | None = None
    finalists: int = 0


def plan(region: Any, lanes: list[Any], records: Records, region_id: int, env_id: int,
         trials: int) -> Plan:
    chosen = {ln.name: ln for ln in lanes}
    spaces = {n: ln.space(region) for n, ln in chosen.items()}
    sizes = {n: space_size(s) for n, s in spaces.items()}
    counts = list(sizes.values())
    total = None if any(n is None for n in counts) else sum(counts)  # type: ignore[arg-type]
    measured = {(r.lane, r.config.key): r for r in records.results(region_id, env_id)
                if r.lane in chosen}
    target = trials if total is None else min(trials, total)
    return Plan(chosen, spaces, total, target, measured, sizes)


def _params(lane: str, config: Config) -> dict[str, Any]:
    return {"lane": lane, **{f"{lane}.{k}": v for k, v in config.items}}


def _distributions(p: Plan, lane: str) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution

    d = {"lane": CategoricalDistribution(sorted(p.lanes))}
    for t in p.spaces[lane].tunables:
        d[f"{lane}.{t.name}"] = CategoricalDistribution(t.choices)
    return d


def _objective(r: Result, budget: float) -> tuple[float, dict[str, Any]]:
    err = r.rel_error if r.rel_error is not None and math.isfinite(r.rel_error) else None
    attrs = {"candidate": r.candidate_id, "status": r.status.value, "rel_error": err,
             "constraint": (err - budget) if err is not None else 1.0}
    value = r.median * 1e3 if r.median is not None else math.inf
    return value, attrs


def study_name(region: Any, fingerprint: str, p: Plan) -> str:
    lanes = ",".join(f"{n}@{p.lanes[n].version}" for n in sorted(p.lanes))
    tag = hashlib.sha256(lanes.encode()).hexdigest()[:8]
    return f"{region.name or 'region'}:{region.key[:12]}:{fingerprint}:{tag}"


def _open_study(url: str, name: str) -> Any:
    """The study in the database: finished trials only, written by `_mirror`."""
    import optuna
    from optuna.samplers import RandomSampler
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(
        url, engine_kwargs={"connect_args": {"timeout": 30}} if url.startswith("sqlite") else {})
    if url.startswith("sqlite"):
        # Optuna's own engine: same WAL/synchronous=NORMAL pragmas as ours (no fsync per
        # commit; a killed process still loses nothing committed)
        from sqlalchemy import event

        from ._store.session import _sqlite_pragmas

        event.listen(storage.engine, "connect", _sqlite_pragmas)
        storage.engine.dispose()
    # nothing is sampled on this study; the sampler lives on the in-memory one
    study = optuna.create_study(study_name=name, storage=storage, sampler=RandomSampler(),
                                direction="minimize", load_if_exists=True)
    # a RUNNING trial left by a killed sweep of an older arbiter (which asked on this study)
    # never finishes; its result (if it got that far) is in our records and is told again
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
    return study


class _Deferred:
    """The database study, written while the worker builds and verifies the next candidate.

    Optuna's write of one finished trial is ~30 SQL statements (~8 ms on SQLite); done between
    trials it was most of the arbiter's own time per trial. Handed to `Worker.check` as its
    `meanwhile`, it overlaps the next candidate's build and check and never its timing (the
    worker waits for it before timing). Our records are committed first and are the source of
    truth: a trial still pending when the process dies is written by `_sync` on the next run.
    """

    def __init__(self, study: Any) -> None:
        self.study = study
        self.pending: list[Any] = []

    def add_trial(self, trial: Any) -> None:
        self.pending.append(trial)

    def get_trials(self, *args: Any, **kw: Any) -> Any:
        return self.study.get_trials(*args, **kw)

    def flush(self) -> None:
        while self.pending:
            self.study.add_trial(self.pending[0])
            self.pending.pop(0)


def _memory_study(sampler: Any) -> Any:
    import optuna

    return optuna.create_study(sampler=sampler, direction="minimize")


def _sync(mirror: Any, study: Any, p: Plan, budget: float) -> None:
    """Tell the in-memory study every recorded candidate, and the database study those it
    does not know yet (once per region)."""
    from optuna.trial import TrialState

    known = {t.user_attrs.get(ATTR, {}).get("candidate")
             for t in mirror.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
    for r in list(p.measured.values()):
        t = _finished(p, r, budget)
        if t is not None:
            study.add_trial(t)
            if r.candidate_id not in known:
                mirror.add_trial(t)


def _finished(p: Plan, r: Result, budget: float) -> Any:
    """A recorded result as a finished trial (None: outside the space's distributions;
    recorded as invalid in our tables only)."""
    import optuna

    if p.spaces[r.lane].violation(r.config) is not None:
        return None
    value, attrs = _objective(r, budget)
    return optuna.trial.create_trial(
        params=_params(r.lane, r.config), distributions=_distributions(p, r.lane), value=value,
        user_attrs={ATTR: attrs}, system_attrs={"constraints": (attrs["constraint"],)})


def _add(studies: tuple[Any, ...], p: Plan, r: Result, budget: float) -> None:
    """Tell the studies a recorded result as a finished trial (no sampling involved)."""
    t = _finished(p, r, budget)
    if t is not None:
        for study in studies:
            study.add_trial(t)


def _mirror(mirror: Any, trial: Any, value: float, attrs: dict[str, Any]) -> None:
    """Copy a trial the sampler asked for and was told into the database study."""
    import optuna

    mirror.add_trial(optuna.trial.create_trial(
        params=trial.params, distributions=trial.distributions, value=value,
        user_attrs={ATTR: attrs}, system_attrs={"constraints": (attrs["constraint"],)}))


def _pool(p: Plan, rng: random.Random) -> list[tuple[str, Config]]:
    """Every listable candidate, in a seeded random order."""
    pool = [(lane, c) for lane, space in p.spaces.items() if p.sizes[lane] is not None
            for c in space.configs()]
    rng.shuffle(pool)
    return pool


def _unmeasured(p: Plan, pool: list[tuple[str, Config]],
                rng: random.Random) -> tuple[str, Config] | None:
    """The first pool entry not measured yet (random draws for spaces too big to list).

    Recomputed on every call, not consumed: the study may hand back an older queued trial
    (left by a killed sweep) instead of the one just enqueued, and the pick must survive that.
    """
    for lane, cfg in pool:
        if (lane, cfg.key) not in p.measured:
            return lane, cfg
    huge = sorted(ln for ln in p.spaces if p.sizes[ln] is None)
    for _ in range(1000 if huge else 0):
        lane = rng.choice(huge)
        cfg = Config.of({t.name: rng.choice(t.choices) for t in p.spaces[lane].tunables})
        if (lane, cfg.key) not in p.measured and p.spaces[lane].violation(cfg) is None:
            return lane, cfg
    return None


def _suggest(trial: Any, p: Plan) -> tuple[str, Config]:
    lane = trial.suggest_categorical("lane", sorted(p.lanes))
    values = {t.name: trial.suggest_categorical(f"{lane}.{t.name}", t.choices)
              for t in p.spaces[lane].tunables}
    return lane, Config.of(values)


def tune_region(
    region: Any, p: Plan, records: Records, worker: Worker, *, region_id: int, env_id: int,
    lane_ids: dict[str, int], fingerprint: str, budget: float, sampler: str,
    seed: int | None, warmup: int, repeats: int, refinal: bool,
    on_trial: Callable[[str, Config, Result, bool], None] | None = None,
) -> RegionTuning:
    out = RegionTuning(region, budget, reused=len(p.measured))
    # fresh inputs for every sweep, shared by its candidates so the oracle runs once per seed
    seeds = fresh_seeds(2)
    mirror: _Deferred | None = None

    def measure(lane: str, cfg: Config) -> Result:
        problem = p.spaces[lane].violation(cfg)
        if problem is not None:  # never built, never run
            m = Measurement(Status.INVALID, log=f"config rejected by the lane's space: {problem}")
        else:
            m = worker.check(lane, region, cfg, budget, ceiling=ceiling_of(budget),
                             warmup=warmup, repeats=repeats, seeds=seeds,
                             meanwhile=mirror.flush if mirror else None).measurement
        r = records.record(region_id, env_id, lane_ids[lane], cfg, m, budget)
        p.measured[(lane, cfg.key)] = r
        out.new += 1
        out.statuses[r.status.value] = out.statuses.get(r.status.value, 0) + 1
        if on_trial:
            on_trial(lane, cfg, r, True)
        return r

    if p.needed > 0:
        mirror = _Deferred(_open_study(records.url, study_name(region, fingerprint, p)))
        study = _memory_study(make_sampler(sampler, seed))
        both = (study, mirror)
        _sync(mirror, study, p, budget)
        # every lane's default first (smallest spaces, i.e. the vendor libraries, leading): the
        # library is always a measured candidate and the sampler starts from sane points
        for name in sorted(p.lanes, key=lambda n: (p.sizes[n] or math.inf, n)):
            default = p.spaces[name].default
            if p.needed > 0 and (name, default.key) not in p.measured:
                _add(both, p, measure(name, default), budget)
        enumerate_all = p.total is not None and p.total <= p.target
        rng = random.Random(seed)
        pool = _pool(p, rng)
        dupes = asks = 0
        while enumerate_all and p.needed > 0:
            # nothing to sample: measure what is left and tell the studies as finished trials
            pick = _unmeasured(p, pool, rng)
            if pick is None:
                break
            _add(both, p, measure(*pick), budget)
        while not enumerate_all and p.needed > 0 and asks < 5 * p.target + 100:
            asks += 1
            if dupes >= DUPES_BEFORE_ENUM:
                pick = _unmeasured(p, pool, rng)
                if pick is None:
                    break
                study.enqueue_trial(_params(*pick), skip_if_exists=False)
            trial = study.ask()
            lane, cfg = _suggest(trial, p)
            known = p.measured.get((lane, cfg.key))
            r = known if known is not None else measure(lane, cfg)
            # a repeat or a refused config teaches the sampler little; after a run of them we
            # hand it a valid unmeasured candidate ourselves
            dupes = dupes + 1 if known is not None or r.status is Status.INVALID else 0
            value, attrs = _objective(r, budget)
            trial.set_user_attr(ATTR, attrs)
            study.tell(trial, value)
            if known is None:  # a repeat is no new trial in the database
                _mirror(mirror, trial, value, attrs)
        mirror.flush()
    if out.new or refinal or records.winner(region_id, env_id, budget) is None:
        out.choice = finals(region, p, records, worker, region_id, env_id, lane_ids, budget)
        if out.choice is not None:
            records.save_winner(region_id, env_id, budget, out.choice)
    return out


def finals(region: Any, p: Plan, records: Records, worker: Worker, region_id: int,
           env_id: int, lane_ids: dict[str, int], budget: float) -> Choice | None:
    """Re-time the top few interleaved (A B C A B C ...) and choose among those numbers."""
    # cast: fits() implies a timed result, so median is set
    fit = sorted((r for r in p.measured.values() if r.fits(budget)),
                 key=lambda r: cast(float, r.median))
    top = fit[:FINALISTS]
    if len(top) < 2:
        return choose(top, budget)
    samples = worker.interleave(region, [(r.lane, r.config) for r in top])
    final: list[Result] = []
    for r, s in zip(top, samples):
        if isinstance(s, str):
            m = Measurement(Status.LAUNCH_FAILED, log=f"finalist re-timing failed: {s}")
        else:
            m = Measurement(Status.OK if r.status is Status.OK else r.status, r.rel_error,
                            r.max_abs, tuple(s), r.timing_method, log="interleaved finalist")
        final.append(records.record(region_id, env_id, lane_ids[r.lane], r.config, m, budget,
                                    kind=FINAL))
    return choose(final, budget) or choose(top, budget)
