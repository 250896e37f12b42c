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

Everything Optuna does stays off the path between one trial's result and the next trial's
request where it can: opening the studies (and importing Optuna) and writing the database
study happen while the worker builds and verifies a candidate, and on the sampled path the next
candidate is asked for then too, with the one in flight pending in the study (TPE's constant
liar keeps the sampler from proposing it again).
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
from ._study_rows import TrialWriter
from ._values import Config, Measurement, Space, Status
from ._worker import Worker

__all__ = ["DEFAULT_SAMPLER", "SAMPLERS", "Asker", "Plan", "RegionTuning", "check_sampler",
           "make_sampler", "tune_region"]

ENUMERABLE = 50_000  # larger spaces are sampled only, never listed
DUPES_BEFORE_ENUM = 8  # consecutive already-measured proposals before we pick one ourselves
FINALISTS = 3
ATTR = "arbiter"  # trial user attr: candidate id, status, rel_error, constraint


def constraint_of(trial: Any) -> tuple[float]:
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
# optuna imports these only at a sampler's first trial; checked before the sweep starts
NEEDS = {"gp": "torch"}


def check_sampler(name: str) -> None:
    import importlib.util

    from ._errors import ArbiterError

    if name not in SAMPLERS:
        raise ArbiterError(f"unknown sampler {name!r} (known: {', '.join(SAMPLERS)})")
    need = NEEDS.get(name)
    if need is not None and importlib.util.find_spec(need) is None:
        raise ArbiterError(f"sampler {name!r} needs a missing package: "
                           f"No module named {need!r}")


def make_sampler(name: str, seed: int | None) -> Any:
    from ._errors import ArbiterError

    check_sampler(name)
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
    total: int | None  # candidates in all spaces together; None: too many to list, or done
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
    measured = {(r.lane, r.config.key): r for r in records.results(region_id, env_id)
                if r.lane in chosen}
    if sum(1 for r in measured.values() if r.status is not Status.INVALID) >= trials:
        # finished already (a sweep run again): nothing will be searched, so the spaces are
        # not walked to count them (a few ms per lane and region)
        return Plan(chosen, spaces, None, trials, measured, {n: None for n in spaces})
    sizes = {n: space_size(s) for n, s in spaces.items()}
    counts = list(sizes.values())
    total = None if any(n is None for n in counts) else sum(counts)  # type: ignore[arg-type]
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
    # the lanes, their versions and their spaces' choices (x86_c's follow the core count):
    # a study's distributions never change under one name
    lanes = ";".join(f"{n}@{p.lanes[n].version}:" + ",".join(
        f"{t.name}={t.choices!r}" for t in p.spaces[n].tunables) for n in sorted(p.lanes))
    tag = hashlib.sha256(lanes.encode()).hexdigest()[:8]
    return f"{region.name or 'region'}:{region.key[:12]}:{fingerprint}:{tag}"


def _open_study(url: str, name: str) -> TrialWriter:
    """The study in the database (finished trials only), ready to be written to."""
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
    return TrialWriter(study, storage, storage.get_study_id_from_name(name))

def _trial(params: dict[str, Any], distributions: dict[str, Any], value: float,
           attrs: dict[str, Any]) -> Any:
    """A finished trial in the one format both studies store (constraint for the samplers)."""
    import optuna

    return optuna.trial.create_trial(
        params=params, distributions=distributions, value=value, user_attrs={ATTR: attrs},
        system_attrs={"constraints": (attrs["constraint"],)})


def _finished(p: Plan, r: Result, budget: float) -> Any:
    """A recorded result as a finished trial (None: a config the space's distributions cannot
    express; a rule breaker can, and is told as infeasible, as when the sampler asked it)."""
    choices = {t.name: t.choices for t in p.spaces[r.lane].tunables}
    values = dict(r.config.items)
    if values.keys() != choices.keys() or any(v not in choices[k] for k, v in values.items()):
        return None
    value, attrs = _objective(r, budget)
    return _trial(_params(r.lane, r.config), _distributions(p, r.lane), value, attrs)


class _Studies:
    """The region's two studies, opened lazily and written while the worker is busy.

    The database study (what optuna-dashboard shows) gets one finished trial per measured
    candidate (~2 ms each on SQLite, `TrialWriter`), and opening it (import, Optuna's schema
    check) costs ~0.1-0.3 s. Both are done by `flush`, which the search hands to
    `Worker.check` as its `meanwhile`: they overlap the next candidate's build and check and
    never its timing (the worker waits for them before timing). Our records are committed
    first and are the source of truth: a trial still pending when the process dies is written
    on the next run, which adds every recorded candidate the database study lacks.

    The sampler's study lives in memory, rebuilt from the records when opened; the
    enumeration path never needs one.
    """

    def __init__(self, url: str, name: str, p: Plan, budget: float,
                 sampler: tuple[str, int | None] | None) -> None:
        self.url, self.name, self.p, self.budget, self.sampler = url, name, p, budget, sampler
        self.db: TrialWriter | None = None
        self.memory: Any = None
        self.pending: list[Any] = []

    def open(self) -> None:
        if self.db is not None:
            return
        from optuna.trial import TrialState

        db = _open_study(self.url, self.name)
        known = {t.user_attrs.get(ATTR, {}).get("candidate")
                 for t in db.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))}
        memory = _memory_study(make_sampler(*self.sampler)) if self.sampler else None
        for r in list(self.p.measured.values()):
            t = _finished(self.p, r, self.budget)
            if t is not None:
                if memory is not None:
                    memory.add_trial(t)
                if r.candidate_id not in known:
                    self.pending.append(t)
        self.db, self.memory = db, memory

    def recorded(self, r: Result) -> None:
        """A result measured without the sampler asking (defaults, enumeration)."""
        if self.db is None:
            return  # `open` reads it from the plan
        t = _finished(self.p, r, self.budget)
        if t is not None:
            self.pending.append(t)
            if self.memory is not None:
                self.memory.add_trial(t)

    def asked(self, trial: Any, value: float, attrs: dict[str, Any]) -> None:
        """A trial the sampler asked for and was told: copy it to the database study."""
        self.pending.append(_trial(trial.params, trial.distributions, value, attrs))

    def flush(self) -> None:
        if self.db is None and not self.p.measured:
            return  # nothing to write yet: opening waits for a window with a build in it
        self.open()
        assert self.db is not None
        while self.pending:
            self.db.add(self.pending[0])
            self.pending.pop(0)


def _memory_study(sampler: Any) -> Any:
    import optuna

    return optuna.create_study(sampler=sampler, direction="minimize")


def _pool(p: Plan, rng: random.Random) -> list[tuple[str, Config]]:
    """Every listable candidate, in a seeded random order."""
    pool = [(lane, c) for lane, space in p.spaces.items() if p.sizes[lane] is not None
            for c in space.configs()]
    rng.shuffle(pool)
    return pool


def _unmeasured(p: Plan, pool: list[tuple[str, Config]], rng: random.Random,
                busy: tuple[str, str] | None = None) -> tuple[str, Config] | None:
    """The first pool entry neither measured nor in flight (random draws for spaces too big
    to list).

    Recomputed on every call, not consumed: the study may hand back an older queued trial
    (left by a killed sweep) instead of the one just enqueued, and the pick must survive that.
    """
    for lane, cfg in pool:
        if (lane, cfg.key) not in p.measured and (lane, cfg.key) != busy:
            return lane, cfg
    huge = sorted(ln for ln in p.spaces if p.sizes[ln] is None)
    for _ in range(1000 if huge else 0):
        lane = rng.choice(huge)
        cfg = Config.of({t.name: rng.choice(t.choices) for t in p.spaces[lane].tunables})
        if ((lane, cfg.key) not in p.measured and (lane, cfg.key) != busy
                and p.spaces[lane].violation(cfg) is None):
            return lane, cfg
    return None


def _suggest(trial: Any, p: Plan) -> tuple[str, Config]:
    lane = trial.suggest_categorical("lane", sorted(p.lanes))
    values = {t.name: trial.suggest_categorical(f"{lane}.{t.name}", t.choices)
              for t in p.spaces[lane].tunables}
    return lane, Config.of(values)


class Asker:
    """The sampled path's proposals: the next unmeasured candidate, asked one trial ahead.

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

    def propose(self, busy: tuple[str, str] | None = None) -> tuple[Any, str, Config] | None:
        while self.asks < self.limit:
            self.asks += 1
            if self.dupes >= DUPES_BEFORE_ENUM:
                pick = _unmeasured(self.p, self.pool, self.rng, busy)
                if pick is None:
                    return None
                self.study.enqueue_trial(_params(*pick), skip_if_exists=False)
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

    def _tell(self, trial: Any, r: Result) -> tuple[float, dict[str, Any]]:
        value, attrs = _objective(r, self.budget)
        trial.set_user_attr(ATTR, attrs)
        self.study.tell(trial, value)
        return value, attrs

    def _record(self, trial: Any, r: Result) -> None:
        value, attrs = self._tell(trial, r)
        if self.mirror is not None:
            self.mirror(trial, value, attrs)

    def told(self, trial: Any, r: Result) -> None:
        """The measured result of a proposal (and of any repeat asked while it was in flight)."""
        if r.status is Status.INVALID:  # refused configs teach the sampler little
            self.dupes += 1
        self._record(trial, r)
        for t in self.waiting:
            self._tell(t, r)
        self.waiting.clear()


def tune_region(
    region: Any, p: Plan, records: Records, worker: Worker, *, region_id: int, env_id: int,
    lane_ids: dict[str, int], fingerprint: str, budget: float, sampler: str,
    seed: int | None, warmup: int, repeats: int, refinal: bool,
    on_trial: Callable[[str, Config, Result, bool], None] | None = None,
) -> RegionTuning:
    out = RegionTuning(region, budget, reused=len(p.measured))
    # fresh inputs for every sweep, shared by its candidates so the oracle runs once per seed
    seeds = fresh_seeds(2)
    enumerate_all = p.total is not None and p.total <= p.target
    studies = _Studies(records.url, study_name(region, fingerprint, p), p, budget,
                       None if enumerate_all else (sampler, seed))

    def measure(lane: str, cfg: Config,
                meanwhile: Callable[[], None] = studies.flush) -> Result:
        problem = p.spaces[lane].violation(cfg)
        if problem is not None:  # never built, never run
            m = Measurement(Status.INVALID, log=f"config rejected by the lane's space: {problem}")
        else:
            m = worker.check(lane, region, cfg, budget, ceiling=ceiling_of(budget),
                             warmup=warmup, repeats=repeats, seeds=seeds,
                             meanwhile=meanwhile).measurement
        r = records.record(region_id, env_id, lane_ids[lane], cfg, m, budget)
        p.measured[(lane, cfg.key)] = r
        out.new += 1
        out.statuses[r.status.value] = out.statuses.get(r.status.value, 0) + 1
        if on_trial:
            on_trial(lane, cfg, r, True)
        return r

    if p.needed > 0:
        # every lane's default first (smallest spaces, i.e. the vendor libraries, leading): the
        # library is always a measured candidate and the sampler starts from sane points
        for name in sorted(p.lanes, key=lambda n: (p.sizes[n] or math.inf, n)):
            default = p.spaces[name].default
            if p.needed > 0 and (name, default.key) not in p.measured:
                studies.recorded(measure(name, default))
        rng = random.Random(seed)
        pool = _pool(p, rng)
        while enumerate_all and p.needed > 0:
            # nothing to sample: measure what is left and tell the studies as finished trials
            pick = _unmeasured(p, pool, rng)
            if pick is None:
                break
            studies.recorded(measure(*pick))
        if not enumerate_all and p.needed > 0:
            studies.open()
            asker = Asker(studies.memory, p, pool, rng, budget, refuse=measure,
                          mirror=studies.asked)
            nxt = asker.propose()
            while nxt is not None:
                trial, lane, cfg = nxt
                ahead: list[Any] = []

                def meanwhile(busy: tuple[str, str] = (lane, cfg.key),
                              ahead: list[Any] = ahead) -> None:
                    studies.flush()
                    if p.needed > 1:  # the one in flight is not recorded yet
                        ahead.append(asker.propose(busy))

                asker.told(trial, measure(lane, cfg, meanwhile))
                if p.needed <= 0:
                    break
                # asked while the worker had this one, unless it never reached the worker
                nxt = ahead[0] if ahead else asker.propose()
        studies.flush()
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
