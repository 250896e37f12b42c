"""The search: one region's sweep, from the plan to a declared winner.

Every lane's default is measured first, then either the whole space (when it is no bigger
than the trial budget: enumerated, never sampled) or the sampler's proposals (`Asker`). Each
candidate goes to the worker with the database study's writes and the next proposal as the
worker's `meanwhile` (`Studies.flush`, `Asker.ask_ahead`): done while it builds and checks,
never while it times. Our records are committed before the next candidate starts and are the
source of truth: the studies are rebuilt from them. Finalists are re-timed interleaved.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from ._asker import Asker, pool, unmeasured
from ._check import fresh_seeds
from ._plan import Plan
from ._records import FINAL, Choice, Records, Result, ceiling_of, choose
from ._studies import Studies
from ._values import Config, Measurement, Status
from ._worker import Worker

__all__ = ["RegionTuning", "finals", "study_name", "tune_region"]

FINALISTS = 3


@dataclass
class RegionTuning:
    region: Any
    budget: float
    new: int = 0
    reused: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    choice: Choice | None = None
    finalists: int = 0


def study_name(region: Any, fingerprint: str, p: Plan) -> str:
    # the lanes, their versions and their spaces' choices (x86_c's follow the core count):
    # a study's distributions never change under one name
    lanes = ";".join(f"{n}@{p.lanes[n].version}:" + ",".join(
        f"{t.name}={t.choices!r}" for t in p.spaces[n].tunables) for n in sorted(p.lanes))
    tag = hashlib.sha256(lanes.encode()).hexdigest()[:8]
    return f"{region.name or 'region'}:{region.key[:12]}:{fingerprint}:{tag}"


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
    studies = Studies(records.url, study_name(region, fingerprint, p), p, budget,
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
        candidates = pool(p, rng)
        while enumerate_all and p.needed > 0:
            # nothing to sample: measure what is left and tell the studies as finished trials
            pick = unmeasured(p, candidates, rng)
            if pick is None:
                break
            studies.recorded(measure(*pick))
        if not enumerate_all and p.needed > 0:
            asker = Asker(studies.memory(), p, candidates, rng, budget, refuse=measure,
                          mirror=studies.asked)
            nxt = asker.next()
            while nxt is not None:
                trial, lane, cfg = nxt

                def meanwhile(busy: tuple[str, str] = (lane, cfg.key)) -> None:
                    studies.flush()
                    asker.ask_ahead(busy)

                asker.told(trial, measure(lane, cfg, meanwhile))
                nxt = asker.next()
        studies.flush_all()
    elif studies.behind():
        studies.flush_all()  # a sweep killed after its last record, before its writes
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
