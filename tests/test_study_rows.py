"""The database study's fast trial writer against Optuna's own `add_trial`, read back through
Optuna: same params, distributions, values, attributes, states, numbers and times."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState

from arbiter._store import require_current
from arbiter._studies import open_study

FIELDS = ("number", "state", "value", "params", "distributions", "user_attrs", "system_attrs",
          "datetime_start", "datetime_complete")


def _trials() -> list:
    lanes = CategoricalDistribution(["numpy", "x86_c"])
    block = CategoricalDistribution([1, 2, 4, 8])
    fast = CategoricalDistribution([False, True])
    out = []
    for i, value in enumerate([0.25, math.inf, 1e-9, 3.5]):
        constraint = -1e-3 if math.isfinite(value) else 1.0
        out.append(optuna.trial.create_trial(
            params={"lane": "x86_c", "x86_c.block": [1, 2, 4, 8][i], "x86_c.fast": bool(i % 2)},
            distributions={"lane": lanes, "x86_c.block": block, "x86_c.fast": fast},
            value=value,
            user_attrs={"arbiter": {"candidate": i, "status": "ok", "rel_error": 1e-7 * i,
                                    "constraint": constraint}},
            system_attrs={"constraints": (constraint,)}))
    return out


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'arbiter.db'}"
    require_current(url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return url


def _read(url: str, name: str) -> list:
    return optuna.load_study(study_name=name, storage=url).get_trials()


def test_fast_rows_read_back_as_optuna_writes_them(url):
    fast, slow = open_study(url, "fast"), open_study(url, "slow")
    trials = _trials()
    fast.add(trials[:1])
    fast.add(trials[1:])  # one trial, then a batch
    for t in trials:
        slow.study.add_trial(t)
    assert fast.fast  # the fast path was taken, not the fallback
    got, want = _read(url, "fast"), _read(url, "slow")
    assert len(got) == len(want) == 4
    for a, b in zip(got, want):
        assert {f: getattr(a, f) for f in FIELDS} == {f: getattr(b, f) for f in FIELDS}
    assert [t.state for t in got] == [TrialState.COMPLETE] * 4
    # what TPE's constraint support reads back
    assert [t.system_attrs["constraints"] for t in got] == [[-1e-3], [1.0], [-1e-3], [-1e-3]]


def test_unexpected_models_fall_back_to_add_trial(url, monkeypatch):
    import arbiter._study_rows as rows

    writer = open_study(url, "fallback")

    class Refusing:  # fails after the trial's row is inserted: another Optuna's tables, say
        @staticmethod
        def dumps(value):
            raise TypeError("unexpected attribute format")

    monkeypatch.setattr(rows, "json", Refusing)
    writer.add(_trials())
    assert not writer.fast
    got = _read(url, "fallback")
    # rolled back before falling back: each trial once, numbered 0..3
    assert [t.number for t in got] == [0, 1, 2, 3]
    assert [t.user_attrs["arbiter"]["candidate"] for t in got] == [0, 1, 2, 3]


def test_a_batch_whose_commit_landed_but_raised_is_not_written_again(url, monkeypatch):
    # a connection lost in COMMIT: the rows are in, the writer was told it failed; the slow
    # path must not add them a second time
    from sqlalchemy.exc import OperationalError

    from arbiter._study_rows import TrialWriter

    writer = open_study(url, "lost-ack")
    real = TrialWriter._insert

    def landed_then_failed(self, trials):
        real(self, trials)
        raise OperationalError("COMMIT", {}, Exception("connection lost"))

    monkeypatch.setattr(TrialWriter, "_insert", landed_then_failed)
    writer.add(_trials()[:2])
    monkeypatch.setattr(TrialWriter, "_insert", real)
    writer.add(_trials()[2:])
    got = _read(url, "lost-ack")
    assert [t.user_attrs["arbiter"]["candidate"] for t in got] == [0, 1, 2, 3]
    assert [t.number for t in got] == [0, 1, 2, 3]
