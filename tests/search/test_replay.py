"""`arbiter replay`: recorded sweeps replayed through the real search, never measured."""

from __future__ import annotations

import json

import pytest

from arbiter.cli import main
from arbiter.lane import Config, Status
from arbiter.records import Result
from arbiter.search import recorded_space, replay
from tests.report import report_db

BUDGET = 1e-3


def _recorded() -> list[Result]:
    """A 6 x 6 x 4 space with one valley at (a=4, b=2, c=1), plus refused and failed ones."""
    out = []
    for a in range(6):
        for b in range(6):
            for c in range(4):
                ms = 1 + abs(a - 4) * 0.4 + abs(b - 2) * 0.3 + c * 0.2
                status = Status.OK
                if (a, b) == (5, 5):
                    status = Status.INVALID
                elif a == 0 and c == 3:
                    status = Status.CRASHED
                timed = status is Status.OK
                out.append(Result(len(out) + 1, "lane_a", Config.of({"a": a, "b": b, "c": c}),
                                  status, 1e-6 if timed else None, None,
                                  ms * 1e-3 if timed else None, None, None, None, False, None,
                                  BUDGET))
    return out


def test_the_recorded_space_admits_exactly_the_recorded_configs():
    results = _recorded()
    [(lane, space)] = recorded_space(results).items()
    assert lane == "lane_a" and space.size() == len(results) == 144
    assert space.default == results[0].config
    assert space.violation(Config.of({"a": 9, "b": 0, "c": 0})) is not None


def test_every_seed_reaches_the_best_and_a_seed_repeats_itself():
    results = _recorded()
    got = replay(results, BUDGET, "tpe", range(5), within=0.0)
    assert got is not None and got.best_ms == pytest.approx(1.0)
    assert got.space == 144 - 4  # the refused configs are not candidates
    assert all(t is not None and 1 <= t <= got.space for t in got.trials)
    assert replay(results, BUDGET, "tpe", range(5), within=0.0).trials == got.trials
    # with a wide margin the default (a=0, b=0, c=0: 2.2x the best) is not yet enough
    loose = replay(results, BUDGET, "random", range(5), within=1.0)
    assert all(t is not None and t > 1 for t in loose.trials)


def test_nothing_within_budget_is_nothing_to_replay():
    assert replay(_recorded(), 1e-9, "random", range(2)) is None


def test_the_command_replays_a_database_and_says_so_in_json(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 'known.db'}"
    report_db.known(url)
    assert main(["replay", "--db", url, "--sampler", "random,tpe", "--seeds", "3",
                 "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows and {r["sampler"] for r in rows} == {"random", "tpe"}
    assert all(r["schema"] == 1 and r["seeds"] == 3 and len(r["trials"]) == 3 for r in rows)
    assert main(["replay", "--db", url, "--sampler", "annealing"]) == 2
    assert "unknown sampler 'annealing'" in capsys.readouterr().err
