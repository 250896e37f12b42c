"""The estimator and the decision rule, on samples whose truth is known."""

from __future__ import annotations

import math
import random

import pytest

from arbiter.measure import (
    FASTER,
    ROUND_CALLS,
    TIE,
    UNRESOLVED,
    compare_rounds,
    estimate,
    median_interval,
    round_values,
)


def test_a_rounds_value_is_its_fastest_call():
    assert round_values([3.0, 1.0, 2.0, 9.0, 8.0, 7.0, 0.5]) == [1.0, 7.0]  # tail dropped
    assert round_values([4.0, 2.0]) == [2.0]  # nothing else: the tail is the round
    assert round_values([]) == []


@pytest.mark.parametrize("n, j", [(5, 0), (6, 1), (9, 2), (10, 2), (20, 6), (50, 18)])
def test_the_median_interval_is_the_binomial_order_statistics(n, j):
    xs = list(range(n))
    lo, hi = median_interval(xs)
    if j == 0:  # too few values for 95%: the whole range
        assert (lo, hi) == (0, n - 1)
    else:
        assert (lo, hi) == (j - 1, n - j)
        below = sum(math.comb(n, i) for i in range(j)) / 2 ** n
        assert below <= 0.025 < below + math.comb(n, j) / 2 ** n


def test_the_median_interval_covers_the_median_at_least_as_often_as_it_says():
    rng = random.Random(5)
    hits = 0
    for _ in range(2000):
        lo, hi = median_interval([rng.expovariate(1.0) for _ in range(15)])
        hits += lo <= math.log(2) <= hi
    assert hits / 2000 >= 0.94


def test_rare_outliers_and_a_slow_minority_of_rounds_move_no_latency():
    rng = random.Random(1)
    clean = [1.0 + 0.001 * rng.random() for _ in range(60)]
    noisy = [20.0 if i % 17 == 0 else x for i, x in enumerate(clean)]  # rare 20x calls
    slow_rounds = [5.0 if i // ROUND_CALLS in (2, 7) else x for i, x in enumerate(clean)]
    for samples in (noisy, slow_rounds):
        e = estimate(samples)
        assert e is not None and e.latency == pytest.approx(1.0, abs=0.002)
        assert not e.unstable


def test_a_bimodal_timing_is_unstable():
    rng = random.Random(2)
    rounds = [[1.0] * 3 if rng.random() < 0.5 else [3.0] * 3 for _ in range(10)]
    e = estimate([x for r in rounds for x in r])
    assert e is not None and e.unstable and e.spread > 1.0


def _paired(ratio: float, noise: float, n: int, seed: int) -> tuple[list[float], list[float]]:
    """Two candidates timed in the same rounds under a drift both share."""
    rng = random.Random(seed)
    a, b = [], []
    for _ in range(n):
        drift = 1 + rng.random() * 0.3
        a += [drift * (1 + noise * rng.random()) for _ in range(ROUND_CALLS)]
        b += [ratio * drift * (1 + noise * rng.random()) for _ in range(ROUND_CALLS)]
    return a, b


def test_a_real_difference_is_resolved_through_a_shared_drift():
    a, b = _paired(1.05, 0.01, 20, 3)
    c = compare_rounds(a, b)
    assert c.verdict == FASTER and c.low > 1.0 and c.ratio == pytest.approx(1.05, abs=0.01)


def test_equal_candidates_are_a_tie_only_inside_the_band():
    a, b = _paired(1.0, 0.005, 40, 4)
    assert compare_rounds(a, b, band=0.02).verdict == TIE
    a, b = _paired(1.0, 0.2, 10, 4)  # too noisy for 10 rounds: neither apart nor the same
    assert compare_rounds(a, b, band=0.02).verdict == UNRESOLVED


def test_a_runner_up_that_is_faster_round_by_round_is_never_called_slower():
    a, b = _paired(0.97, 0.005, 40, 6)
    assert compare_rounds(a, b).verdict == UNRESOLVED
