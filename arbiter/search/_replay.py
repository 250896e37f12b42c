"""A recorded sweep replayed without measuring (Kernel Tuner's simulation mode, on Arbiter's
records): how many trials a sampler needs to come within a margin of the best recorded latency.

The space is what was recorded: each lane's tunables take the values its recorded configs
used, and a rule admits only recorded configs, so a proposal outside the records is refused as
a sweep refuses a rule breaker (recorded as invalid, not counted). The search is the one `tune`
runs (`Search`: each lane's default first, then the sampler), always sampling, never listing
the space, so samplers are compared even where a sweep would enumerate.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..lane import Config, Rule, Space, Status, Tunable
from ..records import Result
from ._plan import Plan
from ._study import Search

__all__ = ["Replay", "recorded_space", "replay"]


@dataclass(frozen=True)
class Replay:
    """One sampler on one recorded space, over several seeds."""

    sampler: str
    space: int  # recorded candidates that were built (refused configs aside)
    best_ms: float
    within: float
    trials: tuple[int | None, ...]  # per seed: trials until within the margin (None: never)

    @property
    def median(self) -> float | None:
        found = [t for t in self.trials if t is not None]
        return statistics.median(found) if len(found) == len(self.trials) else None

    def row(self) -> dict[str, object]:
        found = [t for t in self.trials if t is not None]
        return {"sampler": self.sampler, "space": self.space, "best_ms": self.best_ms,
                "within": self.within, "seeds": len(self.trials),
                "found": len(found), "median_trials": self.median,
                "mean_trials": statistics.fmean(found) if found else None,
                "worst_trials": max(found) if found else None, "trials": list(self.trials)}


def recorded_space(results: Sequence[Result]) -> dict[str, Space]:
    """Each lane's space as recorded; its default is its first recorded config (a sweep
    measures the defaults first)."""
    spaces: dict[str, Space] = {}
    by_lane: dict[str, list[Config]] = {}
    for r in results:
        by_lane.setdefault(r.lane, []).append(r.config)
    for lane, configs in by_lane.items():
        names = list(configs[0].as_dict())
        same = [c for c in configs if list(c.as_dict()) == names]  # one lane version's keys
        choices = {n: list(dict.fromkeys(c[n] for c in same)) for n in names}
        keys = frozenset(c.key for c in same)
        first = same[0].as_dict()
        spaces[lane] = Space(tuple(Tunable(n, tuple(choices[n]), first[n]) for n in names),
                             (_only(keys),))
    return spaces


def _only(keys: frozenset[str]) -> Rule:
    def recorded(values: Mapping[str, Any]) -> bool:
        return Config.of(values).key in keys

    return Rule("recorded", recorded)


def replay(results: Sequence[Result], budget: float, sampler: str, seeds: Sequence[int],
           within: float = 0.05, batch: int = 1) -> Replay | None:
    """Trials `sampler` needs, per seed, to propose a candidate within `budget` whose recorded
    latency is within `within` of the best recorded; None when nothing recorded fits."""
    fitting = [r.latency for r in results if r.fits(budget) and r.latency is not None]
    if not fitting:
        return None
    best = min(fitting)
    spaces = recorded_space(results)
    by_key = {(r.lane, r.config.key): r for r in results}
    size = sum(1 for r in results if r.status is not Status.INVALID)
    out = []
    for seed in seeds:
        p = Plan(dict.fromkeys(spaces), spaces, size,  # type: ignore[arg-type]
                 sizes=dict.fromkeys(spaces))  # never listed: the sampler always chooses
        search = Search(p, sampler, seed, budget)
        out.append(_trials_to(search, p, by_key, budget, best * (1 + within), batch))
    return Replay(sampler, size, best * 1e3, within, tuple(out))


def _trials_to(search: Search, p: Plan, by_key: dict[tuple[str, str], Result], budget: float,
               goal: float, batch: int) -> int | None:
    n = 0
    while p.needed > 0:
        proposals = search.propose(batch)
        if not proposals:
            return None
        for proposal in proposals:
            r = by_key.get(proposal.key) or _refused(proposal.lane, proposal.config, budget)
            search.told(proposal, r)
            if r.status is Status.INVALID:
                continue
            n += 1
            if r.fits(budget) and r.latency is not None and r.latency <= goal:
                return n
    return None


def _refused(lane: str, config: Config, budget: float) -> Result:
    return Result(0, lane, config, Status.INVALID, None, None, None, None, None, None, False,
                  None, budget)
