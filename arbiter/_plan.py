"""What one region's sweep will do, decided from the records before any measurement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._records import Records, Result
from ._values import ENUMERABLE, Space, Status

__all__ = ["Plan", "plan", "space_size"]


def space_size(space: Space) -> int | None:
    return space.size() if space.combinations() <= ENUMERABLE else None


@dataclass
class Plan:
    lanes: dict[str, Any]  # name -> Lane, applicable and available
    spaces: dict[str, Space]
    total: int | None  # candidates in all spaces together; None: too many to list, or done
    target: int  # distinct candidates to have measured when done
    measured: dict[tuple[str, str], Result] = field(default_factory=dict)
    # lane -> number of valid configs (None: too many to list); counting walks the whole space,
    # so it is done once here and read by the ordering, pool and fallback draws
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


def plan(region: Any, lanes: list[Any], records: Records, region_id: int, env_id: int,
         trials: int) -> Plan:
    chosen = {ln.name: ln for ln in lanes}
    spaces = {n: ln.space(region) for n, ln in chosen.items()}
    measured = {(r.lane, r.config.key): r for r in records.results(region_id, env_id)
                if r.lane in chosen}
    done = Plan(chosen, spaces, None, trials, measured, {n: None for n in spaces})
    if done.needed == 0:
        # finished already (a sweep run again): nothing will be searched, so the spaces are
        # not walked to count them (a few ms per lane and region)
        return done
    sizes = {n: space_size(s) for n, s in spaces.items()}
    counts = list(sizes.values())
    total = None if any(n is None for n in counts) else sum(counts)  # type: ignore[arg-type]
    target = trials if total is None else min(trials, total)
    return Plan(chosen, spaces, total, target, measured, sizes)
