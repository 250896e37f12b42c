"""One region's sweep, from the plan to a declared winner.

The search proposes a batch of candidates; they build in parallel; then the worker checks and
times each one in turn, with nothing else running; each result is recorded the moment it comes
back and told to the search. When the trial budget is spent, the finalists are re-timed in
interleaved rounds and the winner is declared (`choose.decide`). What is already measured on
this machine is never measured again, so a killed sweep resumes where it stopped.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .check import fresh_seeds
from .choose import Choice, decide, finalists
from .lane import Artifact, Lane, Status, usable_cores
from .measure import BUSY, Measurement, Timing, Worker, build_all, memory_limit, with_cause
from .records import FINAL, Records, Result
from .region import Region
from .search import Plan, Restriction, Search

__all__ = ["BusyNotice", "Options", "RegionSweep", "sweep_region"]


@dataclass(frozen=True)
class Options:
    sampler: str = "tpe"
    seed: int | None = None
    timing: Timing = field(default_factory=Timing)
    refinal: bool = False  # re-time the finalists even when nothing new was measured
    restrict: Restriction = field(default_factory=Restriction)  # --config/--exclude/--where


@dataclass
class RegionSweep:
    """What a region's sweep did."""

    new: int = 0
    reused: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    choice: Choice | None = None


class BusyNotice:
    """Says once per sweep that the machine was busy while it timed."""

    def __init__(self, timing: Timing) -> None:
        self.timing, self.told = timing, False

    def note(self, m: Measurement) -> None:
        if self.told or not (m.waited > 0 or (m.load is not None and m.load > BUSY)):
            return
        self.told = True
        share = (f" (others used {m.load:.0%} of this process's CPUs while it timed)"
                 if m.load is not None and m.load > BUSY else "")
        print(f"arbiter: the machine is busy{share}: each timing waits up to "
              f"{self.timing.wait:g} s for other processes to leave this process's CPUs, and "
              "every measurement records the load it was taken under", file=sys.stderr,
              flush=True)


def sweep_region(region: Region, p: Plan, records: Records, worker: Worker, *, region_id: int,
                 env_id: int, lane_ids: dict[str, int], budget: float, ceiling: float,
                 opts: Options, busy: BusyNotice,
                 on_trial: Callable[[str, Result], None] | None = None) -> RegionSweep:
    out = RegionSweep(reused=len(p.measured))
    seeds = fresh_seeds(2)  # fresh inputs for every sweep, shared by its candidates
    search = Search(p, opts.sampler, opts.seed, budget)

    memory = memory_limit(region)  # (what the worker allows a candidate of this region)

    def record(lane: str, config: Any, m: Measurement, kind: str = "sweep") -> Result:
        m = with_cause(m, worker.timeout, memory)
        r = records.record(region_id, env_id, lane_ids[lane], config, m, budget, kind)
        busy.note(m)
        return r

    while p.needed > 0:
        batch = search.propose(usable_cores())
        if not batch:
            break
        built = build_all([(p.lanes[b.lane], region, b.config) for b in batch])
        for proposal, artifact in zip(batch, built):
            m = artifact if isinstance(artifact, Measurement) else worker.check(
                proposal.lane, region, artifact, budget, seeds=seeds, ceiling=ceiling,
                timing=opts.timing)
            r = record(proposal.lane, proposal.config, m)
            search.told(proposal, r)
            out.new += 1
            out.statuses[r.status.value] = out.statuses.get(r.status.value, 0) + 1
            if on_trial:
                on_trial(proposal.lane, r)
    declared = records.winners(region_id, env_id, budget)
    # a winner decided with another equivalence band, or over a space the user narrowed, or
    # without a finalist the environment failed (killed in its rounds), is decided again
    if (out.new or opts.refinal or opts.restrict or not declared
            or declared[0]["band"] != opts.timing.band
            or _finalist_failed_by_environment(p, records, region_id, env_id, budget,
                                               worker.timeout, memory)):
        out.choice = _finals(region, p, records, worker, seeds, budget, opts.timing, record)
        if out.choice is not None:
            records.save_winner(region_id, env_id, budget,
                                {**out.choice.stored(), "band": opts.timing.band})
    return out


def _finalist_failed_by_environment(p: Plan, records: Records, region_id: int, env_id: int,
                                    budget: float, timeout: float,
                                    memory: int | None) -> bool:
    """Did a finalist's latest re-timing fail for the environment's reasons (`retried`)?"""
    top = {r.candidate_id for r in finalists(list(p.measured.values()), budget)}
    return any(r.candidate_id in top and r.retried(timeout, memory)
               for r in records.results(region_id, env_id, FINAL))


def _finals(region: Region, p: Plan, records: Records, worker: Worker, seeds: list[int],
            budget: float, timing: Timing,
            record: Callable[..., Result]) -> Choice | None:
    """Re-time the finalists interleaved and decide among those numbers. A finalist that
    no longer builds or passes is left out. If the rounds themselves die (a kernel that
    crashes or hangs only now), each finalist is timed alone to find which one: it is
    recorded so and left out, and the others are timed together again."""
    top = finalists(list(p.measured.values()), budget)
    entries: list[tuple[Result, Lane, Artifact]] = []
    for r, a in zip(top, build_all([(p.lanes[r.lane], region, r.config) for r in top])):
        if isinstance(a, Measurement):
            record(r.lane, r.config, a, FINAL)
        else:
            entries.append((r, p.lanes[r.lane], a))

    def rounds(of: list[tuple[Result, Lane, Artifact]]) -> list[Measurement] | None:
        ms = worker.finals(region, [(lane.name, a) for _, lane, a in of], budget,
                           seeds=seeds, timing=timing)
        died = len(of) > 1 and all(m.status in (Status.CRASHED, Status.TIMEOUT) for m in ms)
        return None if died else ms

    ms = rounds(entries) if entries else []
    if ms is None:
        kept = []
        for e in entries:
            [alone] = worker.finals(region, [(e[1].name, e[2])], budget, seeds=seeds,
                                    timing=timing)
            if alone.status in (Status.CRASHED, Status.TIMEOUT):
                record(e[0].lane, e[0].config, alone, FINAL)
            else:
                kept.append(e)
        entries = kept
        ms = rounds(entries) if entries else []
    if ms is None:
        return None
    final = [(record(r.lane, r.config, m, FINAL), m) for (r, _, _), m in zip(entries, ms)]
    return decide(final, timing.band)
