"""The figures show each winner at the one latency `best` gives, with its interval; axes fit
what they show (log where ratios span a decade, no empty decades of error); the memory roof
says which rates come from the cache; no model's roof is drawn over measured results unasked."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.collections import LineCollection, PathCollection

from arbiter import report

from . import report_db


@pytest.fixture
def known(tmp_path) -> str:
    url = f"sqlite:///{tmp_path / 'known.db'}"
    report_db.known(url)
    return url


def _star_and_interval(ax):
    stars = [c for c in ax.collections if isinstance(c, PathCollection)
             and c.get_offsets().shape[0] == 1 and c.get_sizes()[0] >= 160]
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    [star] = stars
    [bar] = bars
    [segment] = bar.get_segments()
    return float(star.get_offsets()[0][1]), sorted(float(y) for y in segment[:, 1])


@pytest.mark.parametrize("figure", ["latency_vs_error", "convergence"])
def test_the_winner_is_drawn_at_its_declared_latency_and_interval(known, figure):
    trials, summary = report.trials(known), report.summary(known)
    row = summary[summary["region"] == "mm_relu"].iloc[0]
    fig = getattr(report, figure)(trials, summary)
    ax = next(a for a in fig.axes if a.get_title() == "mm_relu")
    y, (low, high) = _star_and_interval(ax)
    assert y == pytest.approx(row["winner_ms"])
    assert (low, high) == pytest.approx((row["winner_low_ms"], row["winner_high_ms"]))


def test_errors_far_below_the_budget_do_not_stretch_the_axis(known):
    trials, summary = report.trials(known), report.summary(known)
    fig = report.latency_vs_error(trials, summary)
    for ax in fig.axes:
        row = summary[summary["region"] == ax.get_title()]
        if row.empty:
            continue
        budget = row["budget"].iloc[0]
        left, right = ax.get_xlim()
        assert left >= budget * 1e-2 / 2 and right <= budget * 1e3
        xs = np.concatenate([c.get_offsets()[:, 0] for c in ax.collections
                             if isinstance(c, PathCollection) and len(c.get_offsets())])
        assert xs.min() >= left  # every point on the axis


@pytest.mark.parametrize("spread, scale", [(30.0, "log"), (3.0, "linear")])
def test_speedups_spanning_a_decade_get_a_log_axis(known, spread, scale):
    summary = report.summary(known)
    s = summary[summary["speedup"].notna()].copy()
    s = s.iloc[[0, 0]].reset_index(drop=True)
    s.loc[0, "speedup"], s.loc[1, "speedup"] = 1.1, 1.1 * spread
    s.loc[1, "region"] = "other"
    ax = report.speedup(s).axes[0]
    assert ax.get_xscale() == scale


def test_a_working_set_in_the_cache_is_marked_on_the_memory_roof(known):
    summary, ceilings = report.summary(known), report.ceilings(known)
    fig = report.roofline(summary, ceilings)
    memory = fig.axes[1]
    small = summary[summary["winner_ms"].notna()]
    assert (small["bytes"] < 2**20).all()  # the known regions are tiny: in any cache
    assert all(p.get_hatch() == "//" for p in memory.patches if p.get_width() > 0)
    assert "fits in the cache" in memory.get_xlabel()


def test_no_model_roof_over_measured_results_unless_asked(known):
    summary, ceilings = report.summary(known), report.ceilings(known)
    labels = [t.get_text() for t in report.roofline(summary, ceilings).axes[0].get_legend()
              .get_texts()]
    assert not any("gfx1151" in t for t in labels)
    asked = report.roofline(summary, ceilings, reference="gfx1151").axes[0].get_legend()
    assert any("gfx1151 peak" in t.get_text() for t in asked.get_texts())
