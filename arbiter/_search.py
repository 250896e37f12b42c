"""The search: one region's sweep, from the plan to a declared winner.

Every lane's default is measured first, then either the whole space (when it is no bigger
than the trial budget: enumerated, never sampled) or the sampler's proposals (`Asker`). Each
candidate goes to the worker with the database study's writes and the next proposal as the
worker's `meanwhile` (`Studies.flush`, `Asker.ask_ahead`): done while it builds and checks,
never while it times (the sampler's first proposal in the last default's window, while the
sampler still draws at random). So is the bookkeeping of the trial before: its record, and
telling the sampler, are done once the next candidate is on its way (`settle`), unless the
next proposal depends on it. Our records are the source of truth: the studies are rebuilt from them.
Finalists are re-timed interleaved.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, cast

from ._asker import Asker, pool, unmeasured
from ._plan import Plan
from ._records import FINAL, Choice, Records, Result, ceiling_of, choose
from ._studies import Studies
from ._values import Config, Measurement, Platform, Status
from ._worker import Worker

Expected = tuple[str, Config] | None  # the candidate expected after the one in the worker

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
    # (the first region's may have been made while the sweep started)
    seeds = worker.seeds_for(region)
    enumerate_all = p.total is not None and p.total <= p.target
    studies = Studies(records.url, study_name(region, fingerprint, p), p, budget,
                      None if enumerate_all else (sampler, seed))

    # a measured result not recorded yet: the next candidate is sent to the worker first, and
    # the record and the sampler's tell are done while it builds (its `meanwhile`)
    held: list[tuple[str, Config, Measurement, Callable[[Result], None]]] = []

    def record(lane: str, cfg: Config, m: Measurement) -> Result:
        r = records.record(region_id, env_id, lane_ids[lane], cfg, m, budget)
        p.measured[(lane, cfg.key)] = r
        out.new += 1
        out.statuses[r.status.value] = out.statuses.get(r.status.value, 0) + 1
        if on_trial:
            on_trial(lane, cfg, r, True)
        return r

    def settle() -> None:
        """Record the result held back, and hand it on (to the studies or the sampler)."""
        while held:
            lane, cfg, m, then = held.pop(0)
            then(record(lane, cfg, m))

    def left() -> int:
        """Candidates still to measure, the one held back counted as measured."""
        return p.needed - sum(1 for _, _, m, _ in held if m.status is not Status.INVALID)

    def in_flight() -> tuple[str, str] | None:
        return (held[0][0], held[0][1].key) if held else None

    def refused(lane: str, cfg: Config) -> Measurement | None:
        problem = p.spaces[lane].violation(cfg)
        if problem is None:
            return None
        return Measurement(Status.INVALID, log=f"config rejected by the lane's space: {problem}")

    def refuse(lane: str, cfg: Config) -> Result:  # never built, never run
        m = refused(lane, cfg)
        assert m is not None
        return record(lane, cfg, m)

    def measure(lane: str, cfg: Config, then: Callable[[Result], None],
                meanwhile: Callable[[], Expected] = studies.flush) -> Measurement:
        """Check one candidate; its result is held, to be recorded and passed to `then` by
        the next candidate's `meanwhile` or by `settle`. `meanwhile` returns the candidate
        expected next, if it knows it: the worker builds that one ahead."""
        m = refused(lane, cfg)
        if m is not None:
            settle()
            then(record(lane, cfg, m))
            return m

        def window() -> Expected:
            settle()
            return meanwhile()

        m = worker.check(lane, region, cfg, budget, ceiling=ceiling_of(budget),
                         warmup=warmup, repeats=repeats, seeds=seeds,
                         meanwhile=window, send_next=True).measurement
        held.append((lane, cfg, m, then))
        return m

    try:
        if p.needed > 0:
            # every lane's default first (smallest spaces, i.e. the vendor libraries, leading):
            # the library is always a measured candidate and the sampler starts from sane points
            defaults = [(name, p.spaces[name].default)
                        for name in sorted(p.lanes, key=lambda n: (p.sizes[n] or math.inf, n))
                        if (name, p.spaces[name].default.key) not in p.measured]
            # the CPU lanes' compile while the first request makes the region's references
            worker.build_early([(region, name, default) for name, default in defaults[:left()]
                                if p.lanes[name].platform is Platform.CPU])
            rng = random.Random(seed)
            candidates = pool(p, rng)
            named = worker.named_early(region)
            if enumerate_all:  # those compiled while the sweep started up, first
                first = [(ln, c) for ln, c in named if ln in p.spaces]
                keys = {(ln, c.key) for ln, c in first}
                candidates = first + [(ln, c) for ln, c in candidates if (ln, c.key) not in keys]
            made: list[Asker] = []  # the sampled path's, made in the last default's window

            def new_asker() -> Asker:
                return Asker(studies.memory(), p, candidates, rng, budget, refuse=refuse,
                             mirror=studies.asked)

            def first_ask(busy: tuple[str, Config]) -> Expected:
                """The sampler's study made, and its first proposal asked ahead where no
                result changes it."""
                studies.flush_and_ready()
                made.append(new_asker())
                return made[0].ask_ahead_of_default(*busy)

            def default_recorded(r: Result) -> None:
                # the sampler's study gets it from the Asker when it was asked ahead of it
                studies.recorded(r, sampler=not (made and made[0].told_default(r)))

            for i, (name, default) in enumerate(defaults):
                if left() > 0:
                    last = not enumerate_all and i == len(defaults) - 1
                    measure(name, default, default_recorded,
                            partial(first_ask, (name, default)) if last else studies.flush)
            while enumerate_all and left() > 0:
                # nothing to sample: measure what is left and tell the studies as finished
                # trials
                pick = unmeasured(p, candidates, rng, in_flight())
                if pick is None:
                    break

                def following(busy: tuple[str, str] = (pick[0], pick[1].key)) -> Expected:
                    studies.flush()
                    return unmeasured(p, candidates, rng, busy, draw=False)

                measure(*pick, studies.recorded, following)
            if not enumerate_all and left() > 0:
                asker = made[0] if made else None
                if asker is None or not asker.asked_ahead():
                    settle()  # the sampler's first ask starts from every result
                    asker = asker or new_asker()
                nxt = asker.next()
                while nxt is not None:
                    trial, lane, cfg = nxt

                    def meanwhile(busy: tuple[str, str] = (lane, cfg.key)) -> Expected:
                        studies.flush()
                        return asker.ask_ahead(busy)

                    m = measure(lane, cfg, partial(asker.told, trial), meanwhile)
                    if not asker.stands(trial, m):
                        # the next proposal must know this result: the one sent ahead
                        # without it stops now, while this one is recorded and told
                        worker.call_off(wait=False)
                        settle()
                    nxt = asker.next()
            settle()
            studies.flush_all()
        elif studies.behind():
            studies.flush_all()  # a sweep killed after its last record, before its writes
    finally:
        settle()  # a finished trial is kept even when the sweep stops here (Ctrl-C)
    if out.new or refinal or records.winner(region_id, env_id, budget) is None:
        out.choice = finals(region, p, records, worker, region_id, env_id, lane_ids, budget,
                            seeds)
        if out.choice is not None:
            records.save_winner(region_id, env_id, budget, out.choice)
    return out


def finals(region: Any, p: Plan, records: Records, worker: Worker, region_id: int,
           env_id: int, lane_ids: dict[str, int], budget: float,
           seeds: list[int] | None = None) -> Choice | None:
    """Re-time the top few interleaved (A B C A B C ...) and choose among those numbers."""
    # cast: fits() implies a timed result, so median is set
    fit = sorted((r for r in p.measured.values() if r.fits(budget)),
                 key=lambda r: cast(float, r.median))
    top = fit[:FINALISTS]
    if len(top) < 2:
        return choose(top, budget)
    samples = worker.interleave(region, [(r.lane, r.config) for r in top], seeds=seeds).samples
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
