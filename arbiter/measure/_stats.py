"""The estimator every latency is, and the rule that decides between two candidates.

Noise on a real machine only adds time: a neighbour's burst, an interrupt, a page fault, a
descheduled thread. So samples are taken in rounds of `ROUND_CALLS` back-to-back calls, and a
round's value is its fastest call, the least disturbed one. A candidate's latency is the
median of its round values: a round disturbed throughout is outvoted by the others, and rare
outliers never move it. Its interval is the distribution-free confidence interval of that
median (order statistics; no normality assumed).

Two finalists are compared on rounds taken interleaved (A B C, then a shuffled order, ...), so
a round of each sees the same machine. The ratio runner-up / winner is taken round by round,
and the median of those ratios gets the same kind of interval, at a confidence that allows for
looking several times. The comparison is resolved when that interval lies inside the
practical-equivalence band (a tie: the difference is too small to matter) or excludes 1 (the
winner is faster); otherwise more rounds are taken, up to a cap, and what is left is
`unresolved`. The winner is always the one with the lower latency: error plays no part, and a
tie only says the two are interchangeable.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CONFIDENCE", "DECISION_CONFIDENCE", "EQUIVALENCE", "FASTER", "ROUND_CALLS", "TIE",
           "UNRESOLVED", "UNSTABLE_SPREAD", "Comparison", "Estimate", "compare_rounds", "estimate",
           "median_interval", "round_values"]

ROUND_CALLS = 3  # back-to-back calls per round; a round's value is the fastest
CONFIDENCE = 0.95  # a latency's interval
# The finalists' comparison is looked at up to eight times (10, 20, ... 320 rounds, and where
# the time runs out), each time about the pair the data ranked first: the 5% a wrong call
# may cost is split over those looks (Bonferroni), two-sided.
DECISION_CONFIDENCE = 1 - 0.05 / 8
EQUIVALENCE = 0.02  # two latencies within 2% of each other are practically the same
# A timing whose round values spread (interquartile range) over more than this share of their
# median is unstable: re-measured once, and flagged if it stays so. (A shared VM drifts by
# 10-30% over seconds with nothing else running: tighter would flag every candidate there.)
UNSTABLE_SPREAD = 0.25

FASTER, TIE, UNRESOLVED = "faster", "tie", "unresolved"


def round_values(samples: Sequence[float], calls: int = ROUND_CALLS) -> list[float]:
    """The fastest call of each round of `calls` consecutive samples (a short tail is a round
    of its own only when there is nothing else)."""
    whole = len(samples) // calls
    if whole == 0:
        return [min(samples)] if samples else []
    return [min(samples[i * calls:(i + 1) * calls]) for i in range(whole)]


def median_interval(values: Sequence[float],
                    confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The order statistics x(j) and x(n+1-j) that cover the median with at least
    `confidence` (j the largest rank with P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2);
    the whole range when there are too few values for that."""
    xs = sorted(values)
    n = len(xs)
    tail = (1 - confidence) / 2
    j, below = 0, 0
    for i in range(n // 2):
        below += math.comb(n, i)
        if below / 2**n > tail:
            break
        j = i + 1
    return (xs[0], xs[-1]) if j == 0 else (xs[j - 1], xs[n - j])


@dataclass(frozen=True)
class Estimate:
    """A candidate's latency from its samples (seconds)."""

    latency: float  # median over rounds of each round's fastest call
    low: float  # its confidence interval
    high: float
    spread: float  # interquartile range of the round values
    rounds: int

    @property
    def unstable(self) -> bool:
        return self.spread > UNSTABLE_SPREAD * self.latency


def _spread(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q3 - q1


def estimate(samples: Sequence[float], calls: int = ROUND_CALLS) -> Estimate | None:
    values = round_values(samples, calls)
    if not values:
        return None
    low, high = median_interval(values)
    return Estimate(statistics.median(values), low, high, _spread(values), len(values))


@dataclass(frozen=True)
class Comparison:
    """Runner-up against winner over paired rounds."""

    ratio: float  # median over rounds of runner-up / winner round values
    low: float
    high: float
    verdict: str  # FASTER, TIE or UNRESOLVED
    rounds: int

    @property
    def resolved(self) -> bool:
        return self.verdict != UNRESOLVED


def compare_rounds(winner: Sequence[float], runner_up: Sequence[float],
                   band: float = EQUIVALENCE, calls: int = ROUND_CALLS) -> Comparison:
    """Compare two candidates' samples taken in the same interleaved rounds (the rounds both
    have)."""
    pairs = list(zip(round_values(winner, calls), round_values(runner_up, calls)))
    ratios = [r / w for w, r in pairs]
    low, high = median_interval(ratios, DECISION_CONFIDENCE)
    if low >= 1.0 / (1.0 + band) and high <= 1.0 + band:
        verdict = TIE
    elif low > 1.0:
        verdict = FASTER
    else:
        verdict = UNRESOLVED
    return Comparison(statistics.median(ratios), low, high, verdict, len(ratios))
