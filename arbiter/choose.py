"""Who wins. A region's winner is decided once, from its finalists' interleaved re-timing: the
lowest latency wins, and its runner-up is told apart by the paired-round ratio
(`arbiter.measure.compare_rounds`): faster, a tie, or unresolved. Error decides nothing while
both are within the budget. `best` answers another budget from what was recorded."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .lane import Status
from .measure import EQUIVALENCE, TIE, Comparison, Measurement, compare_rounds
from .records import Result

__all__ = ["FINALISTS", "NEAREST_WITHIN", "VENDOR_LANES", "Choice", "choose", "decide",
           "finalists", "neighbours", "winner_that_stands"]

# How far (log2 shape distance) a tuned region may be for its winner to answer for an untuned
# one: 2 is one size quadrupled, or two doubled (README: "Shapes nobody tuned").
NEAREST_WITHIN = 2.0

FINALISTS = 3  # the fastest by their sweep latency, re-timed interleaved
VENDOR_LANES = ("numpy", "torch")  # the libraries a user would call instead: always finalists


@dataclass(frozen=True)
class Choice:
    winner: Result
    runner_up: Result | None
    comparison: Comparison | None  # None: no runner-up, or chosen from sweep numbers alone

    @property
    def verdict(self) -> str | None:
        return None if self.comparison is None else self.comparison.verdict

    @property
    def margin(self) -> float | None:
        """Runner-up latency minus the winner's (seconds)."""
        if self.runner_up is None or self.runner_up.latency is None:
            return None
        return self.runner_up.latency - self.winner.latency  # type: ignore[operator]

    def stored(self) -> dict[str, Any]:
        """The winner's row in the records (`winners`)."""
        w, c = self.winner, self.comparison
        return {
            "candidate_id": w.candidate_id,
            "runner_up_id": None if self.runner_up is None else self.runner_up.candidate_id,
            "latency": w.latency, "latency_low": w.latency_low, "latency_high": w.latency_high,
            "spread": w.spread, "rel_error": w.rel_error, "margin": self.margin,
            "ratio": None if c is None else c.ratio, "ratio_low": None if c is None else c.low,
            "ratio_high": None if c is None else c.high, "verdict": self.verdict,
            "tie": self.verdict == TIE, "unstable": w.unstable, "load": w.load,
        }


def _by_latency(results: Sequence[Result]) -> list[Result]:
    return sorted(results, key=lambda r: (r.latency if r.latency is not None else math.inf,
                                          r.candidate_id))


def finalists(results: Sequence[Result], budget: float) -> list[Result]:
    """The `FINALISTS` fastest within `budget` by their sweep latency, plus each vendor lane's
    fastest: a winner is then never slower than the library in the same rounds, and the
    speed-up over it is measured there."""
    fit = _by_latency([r for r in results if r.fits(budget)])
    top = fit[:FINALISTS]
    for lane in VENDOR_LANES:
        best = next((r for r in fit if r.lane == lane), None)
        if best is not None and best not in top:
            top.append(best)
    return top


def decide(final: Sequence[tuple[Result, Measurement]], band: float = EQUIVALENCE,
           ) -> Choice | None:
    """The winner among the finalists' interleaved re-timing (each a FINAL result with the
    measurement it recorded): the lowest latency, its runner-up the next."""
    ok = [(r, m) for r, m in final if r.status is Status.OK and r.latency is not None]
    if not ok:
        return None
    # a finalist that left the rounds early was shown slower than the fastest then: it is
    # neither winner nor runner-up (its latency covers fewer, earlier rounds than theirs)
    most = max(len(m.samples) for _, m in ok)
    ok = sorted(((r, m) for r, m in ok if len(m.samples) == most),
                key=lambda rm: (rm[0].latency, rm[0].candidate_id))
    if len(ok) == 1:
        return Choice(ok[0][0], None, None)
    (w, wm), (r, rm) = ok[0], ok[1]
    return Choice(w, r, compare_rounds(wm.samples, rm.samples, band))


def choose(results: Sequence[Result], budget: float) -> Choice | None:
    """The fastest recorded result within `budget` by its sweep latency (no paired rounds:
    no verdict)."""
    fit = _by_latency([r for r in results if r.fits(budget)])
    if not fit:
        return None
    return Choice(fit[0], fit[1] if len(fit) > 1 else None, None)


def winner_that_stands(winners: Sequence[dict[str, Any]], results: Sequence[Result],
                       budget: float) -> dict[str, Any] | None:
    """A winner declared for another budget that is the answer for `budget` too: it fits
    `budget`, and every candidate that does fitted its own budget and was measured before it
    was declared, so it was chosen over all of them. The tightest such budget's; its runner-up
    only if that fits too."""
    fits = {r.candidate_id for r in results if r.fits(budget)}
    measured: dict[int, datetime | None] = {r.candidate_id: r.measured_at for r in results}
    for w in sorted(winners, key=lambda w: w["budget"]):
        if w["candidate_id"] not in fits or not fits <= {
                r.candidate_id for r in results if r.fits(w["budget"])}:
            continue
        if any((measured[c] or w["declared_at"]) > w["declared_at"] for c in fits):
            continue  # a later sweep (at another budget) measured one it never met
        ru = w["runner_up"]
        if ru is not None and ru["candidate_id"] not in fits:
            w = {**w, "runner_up": None, "tie": False, "verdict": None, "margin_ms": None}
        return w
    return None



def neighbours(region: Any, tuned: Sequence[tuple[int, Any]],
               within: float = NEAREST_WITHIN) -> list[tuple[float, int, Any]]:
    """The tuned regions of `region`'s op chain (`(id, region)` pairs), nearest shape first,
    those within `within`: (distance, id, region)."""
    from .region import shape_distance

    near = [(shape_distance(region, other), rid, other) for rid, other in tuned]
    return sorted((d, rid, o) for d, rid, o in near if d <= within)
