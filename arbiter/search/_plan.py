"""What one region's sweep will do, decided from the records before any measurement."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..lane import ENUMERABLE, Lane, Space, Status
from ..records import Result
from ._restrict import Restriction

__all__ = ["Plan", "plan"]

NOTHING = Restriction()


def _size(space: Space) -> int | None:
    return space.size() if space.combinations() <= ENUMERABLE else None


@dataclass
class Plan:
    lanes: dict[str, Lane]  # applicable and available, by name
    spaces: dict[str, Space]
    target: int  # distinct candidates to have measured when done (refused configs aside)
    measured: dict[tuple[str, str], Result] = field(default_factory=dict)  # (lane, config key)
    sizes: dict[str, int | None] = field(default_factory=dict)  # None: too many to list
    # failed for the environment's reasons (a full disk, a kill, a short timeout): measured
    # again, first
    retry: list[Result] = field(default_factory=list)

    @property
    def needed(self) -> int:
        # a config the lane's rules (or its emitter) refuse costs no build and no run, so it
        # does not use up the trial budget; it is still recorded, so it is never asked again
        tried = sum(1 for r in self.measured.values() if r.status is not Status.INVALID)
        return max(0, self.target - tried)

    @property
    def listed(self) -> bool:
        """Is the whole space within the trial budget (enumerated, never sampled)?"""
        sizes = [n for n in self.sizes.values() if n is not None]
        return len(sizes) == len(self.sizes) and sum(sizes) <= self.target


def plan(region: Any, lanes: list[Lane], results: list[Result], trials: int,
         restrict: Restriction = NOTHING, timeout: float | None = None,
         memory_limit: int | None = None) -> Plan:
    """`restrict`: what the user fixed, excluded and required; a result outside it neither
    counts against `trials` nor is a finalist (one the rules refused stays known). With the
    `timeout` (and `memory_limit`) of a sweep, a result that failed for the environment's
    reasons (`retried`) is not counted but measured again."""
    chosen = {ln.name: ln for ln in lanes}
    spaces = {n: restrict.narrow(n, ln.space(region)) for n, ln in chosen.items()}
    measured = {(r.lane, r.config.key): r for r in results if r.lane in chosen and (
        r.status is Status.INVALID or not restrict
        or spaces[r.lane].violation(r.config) is None)}
    retry = [] if timeout is None else [r for r in measured.values()
                                        if r.retried(timeout, memory_limit)]
    for r in retry:
        del measured[(r.lane, r.config.key)]
    p = Plan(chosen, spaces, trials, measured, retry=retry)
    if p.needed:  # (a finished sweep run again walks no space)
        p.sizes = {n: _size(s) for n, s in spaces.items()}
        if p.listed:
            p.target = min(trials, sum(p.sizes.values()))  # type: ignore[arg-type]
    return p
