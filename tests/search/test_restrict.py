"""`tune --config/--exclude/--where`: the space the user asks for, and nothing else measured;
a `--where` expression is interpreted, never evaluated."""

from __future__ import annotations

import re
import sqlite3

import pytest

import arbiter
from arbiter import ArbiterError
from arbiter.lane import Space, Tunable
from arbiter.measure import Timing
from arbiter.search import Restriction
from tests import fake_lanes
from tests.test_sweep import REGION

TINY = fake_lanes.tiny.space(REGION)  # block (1,2,4,8) x unroll (1,2,4) x fast; block*unroll <= 8


def _configs(space):
    return {tuple(sorted(c.as_dict().items())) for c in space.configs()}


def test_fixed_excluded_and_where_narrow_the_space_and_keep_its_rules():
    r = Restriction(fixed=("fast=false",), excluded=("block=1",),
                    where=("block * unroll >= 4",))
    got = r.narrow("fake_tiny", TINY)
    want = {c for c in _configs(TINY) if dict(c)["fast"] is False and dict(c)["block"] != 1
            and dict(c)["block"] * dict(c)["unroll"] >= 4}
    assert _configs(got) == want and len(want) == 5
    assert got.violation(got.default) is None  # the old default (1, 1) is out: a valid one
    # a name that is another lane's leaves this one alone
    assert _configs(Restriction(fixed=("other.block=2",)).narrow("fake_tiny", TINY)) == \
        _configs(TINY)
    assert {c["block"] for c in Restriction(fixed=("fake_tiny.block=2",)).narrow(
        "fake_tiny", TINY).configs()} == {2}


@pytest.mark.parametrize("text", [
    "__import__('os').system('true')", "block.__class__", "block ** 99", "[b for b in (1,)]",
    "(lambda: 1)()", "open('x')", "block if unroll else 2", "block <",
])
def test_a_where_expression_outside_the_grammar_is_refused_before_anything_runs(text):
    with pytest.raises(ArbiterError, match="--where"):
        Restriction(where=(text,))


@pytest.mark.parametrize("r, needle", [
    (Restriction(fixed=("block=3",)), "not among [1, 2, 4, 8]"),
    (Restriction(excluded=("fast=false", "fast=true")), "leaves fast no value"),
    (Restriction(where=("block > 100",)), "no config satisfies"),
])
def test_a_space_left_empty_is_one_clear_error(r, needle):
    with pytest.raises(ArbiterError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        r.narrow("fake_tiny", TINY)


def test_a_name_no_lane_has_is_refused():
    with pytest.raises(ArbiterError, match="'blok' is no tunable"):
        Restriction(where=("blok < 2",)).check([("fake_tiny", TINY)])


OTHER = Space((Tunable("block", (16, 32), 16), Tunable("width", (1, 2), 1)))
SWEPT = [("fake_tiny", TINY), ("other", OTHER)]


@pytest.mark.parametrize("r, needle", [
    (Restriction(excluded=("block=3",)), "--exclude block=3: no lane swept offers block=3 "
     "(its values: 1, 2, 4, 8, 16, 32)"),
    (Restriction(excluded=("fake_tiny.block=16",)), "--exclude fake_tiny.block=16: no lane"),
    (Restriction(fixed=("block=3",)), "--config block=3: no lane swept offers"),
    (Restriction(where=("unroll > 1 and width > 1",)), "no lane swept has all of unroll, "
     "width"),
    (Restriction(fixed=("block=2", "block=4")), "--config block=2 and block=4"),
])
def test_a_value_or_a_rule_no_lane_can_honour_is_refused(r, needle):
    """Before this, an excluded value no lane has, or a rule over tunables of two different
    lanes, restricted nothing and said nothing."""
    with pytest.raises(ArbiterError, match=re.escape(needle)):
        r.check(SWEPT)


def test_what_one_lane_knows_is_fine_where_another_does_not():
    Restriction(fixed=("unroll=2",), excluded=("block=16", "width=2", "fake_tiny.block=1"),
                where=("width > 1",)).check(SWEPT)


def test_a_restricted_sweep_measures_only_inside_and_declares_its_winner_there(
        tmp_path, monkeypatch):
    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes("fake_tiny"))
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    url = f"sqlite:///{tmp_path / 'r.db'}"
    quick = Timing(wait=0.1, rounds=2, input_sets=1, min_rounds=2, max_rounds=4, max_seconds=1)
    # the best overall is block=4 unroll=2; with block fixed to 2 it is block=2 unroll=2
    [row] = arbiter.tune(REGION, db=url, lanes=["fake_tiny"], timing=quick,
                         config=["block=2", "fast=false"])
    assert row["config"] == {"block": 2, "fast": False, "unroll": 2}
    with sqlite3.connect(tmp_path / "r.db") as db:
        blocks = {b for (b,) in db.execute(
            "select json_extract(config, '$.block') from candidates")}
    assert blocks == {2}
    # unrestricted again: the records inside count, the rest is measured, the winner moves
    [row] = arbiter.tune(REGION, db=url, lanes=["fake_tiny"], timing=quick)
    assert row["config"] == {"block": 4, "fast": False, "unroll": 2}
