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
from arbiter._study_rows import Finished

FIELDS = ("number", "state", "value", "params", "distributions", "user_attrs", "system_attrs",
          "datetime_start", "datetime_complete")


def _trials() -> list:
    lanes = CategoricalDistribution(["numpy", "x86_c"])
    block = CategoricalDistribution([1, 2, 4, 8])
    fast = CategoricalDistribution([False, True])
    out = []
    for i, value in enumerate([0.25, math.inf, 1e-9, 3.5]):
        constraint = -1e-3 if math.isfinite(value) else 1.0
        out.append(Finished(
            {"lane": "x86_c", "x86_c.block": [1, 2, 4, 8][i], "x86_c.fast": bool(i % 2)},
            {"lane": lanes, "x86_c.block": block, "x86_c.fast": fast}, value,
            {"candidate": i, "status": "ok", "rel_error": 1e-7 * i, "constraint": constraint}))
    return out


@pytest.fixture
def url(tmp_path):
    url = f"sqlite:///{tmp_path / 'arbiter.db'}"
    require_current(url)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return url


def _read(url: str, name: str) -> list:
    return optuna.load_study(study_name=name, storage=url).get_trials()


@pytest.fixture(params=["UTC", "America/New_York", "Asia/Kolkata"])
def zone(request, monkeypatch):
    """The local time zone (Optuna 5 stores a trial's times in UTC, read back as local)."""
    import time

    monkeypatch.setenv("TZ", request.param)
    time.tzset()
    yield request.param
    monkeypatch.undo()
    time.tzset()


@pytest.mark.parametrize("by_driver", [True, False])
def test_fast_rows_read_back_as_optuna_writes_them(url, zone, by_driver, monkeypatch):
    import arbiter._store.driver as driver

    if not by_driver:  # SQLAlchemy's statements, as on PostgreSQL
        monkeypatch.setattr(driver, "by_driver", lambda conn: False)
    fast, slow = open_study(url, "fast"), open_study(url, "slow")
    trials = _trials()
    fast.add(trials[:1])
    fast.add(trials[1:])  # one trial, then a batch
    for t in trials:
        slow.study.add_trial(t.frozen())
    assert fast.fast  # the fast path was taken, not the fallback
    got, want = _read(url, "fast"), _read(url, "slow")
    assert [t.datetime_start for t in got] == [t.at for t in trials]
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


def test_a_study_made_here_is_the_one_optuna_makes(url):
    from optuna.study import StudyDirection

    open_study(url, "ours")
    optuna.create_study(study_name="optunas", storage=url, direction="minimize")
    storage = optuna.storages.RDBStorage(url)
    ours, theirs = (storage.get_study_id_from_name(n) for n in ("ours", "optunas"))
    for read in (storage.get_study_directions, storage.get_study_user_attrs,
                 storage.get_study_system_attrs, storage.get_all_trials):
        assert read(ours) == read(theirs)
    assert storage.get_study_directions(ours) == [StudyDirection.MINIMIZE]
    assert set(optuna.get_all_study_names(url)) == {"ours", "optunas"}
    # found, not made again
    assert open_study(url, "ours").study_id == open_study(url, "ours").study_id


def test_a_trial_left_running_by_an_older_arbiter_is_failed_when_the_study_opens(url):
    study = optuna.create_study(study_name="old", storage=url, direction="minimize")
    study.add_trial(_trials()[0].frozen())
    study.ask()  # asked on the database study, then killed
    writer = open_study(url, "old")
    assert [t.state for t in _read(url, "old")] == [TrialState.COMPLETE, TrialState.FAIL]
    assert writer.held() == {0}
    writer.add(_trials()[1:])
    assert [t.number for t in _read(url, "old")] == [0, 1, 2, 3, 4]


def test_tables_the_writer_does_not_know_open_and_write_through_optuna(url, monkeypatch):
    import arbiter._study_rows as rows

    def refuse(self):
        raise AttributeError("another Optuna's models")

    monkeypatch.setattr(rows.TrialWriter, "_tb", refuse)
    writer = open_study(url, "theirs")
    assert not writer.fast
    writer.add(_trials())
    writer.add(_trials())  # held: not written twice
    assert [t.user_attrs["arbiter"]["candidate"] for t in _read(url, "theirs")] == [0, 1, 2, 3]
