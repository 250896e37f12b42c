"""The sweep: failing candidates become recorded statuses, small spaces are enumerated, nothing
is measured twice, the true fastest wins under adversarial noise, budgets change at query time,
foreign winners are re-verified."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import arbiter
from arbiter import ArbiterError, Config, FusedRegion, RowwiseRegion
from arbiter.measure import Timing
from arbiter.records import Fingerprint
from tests import fake_lanes
from tests.procs import every

REGION = FusedRegion(8, 16, 8, name="small", epilogue=("bias", "relu"))
FAILING = ["fake_segfault", "fake_hang", "fake_garbage", "fake_untouched", "fake_nan",
           "fake_broken_build", "fake_exit"]
QUICK = Timing(wait=0.2)


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes())
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    return f"sqlite:///{tmp_path / 'arbiter.db'}"


def _rows(url: str, sql: str) -> list[tuple]:
    return sqlite3.connect(url.removeprefix("sqlite:///")).execute(sql).fetchall()


def _sweep_counts(url: str) -> list[tuple]:
    return _rows(url, "select c.id, count(m.id) from candidates c join measurements m "
                      "on m.candidate_id = c.id where m.kind = 'sweep' group by c.id")


def test_every_failure_is_recorded_and_the_sweep_goes_on(env):
    [row] = arbiter.tune(REGION, db=env, trials=20, lanes=FAILING + ["numpy"], timeout=3)
    assert row["lane"] == "numpy"
    got = dict(_rows(env, "select l.name, m.status from measurements m join candidates c on "
                          "m.candidate_id = c.id join lanes l on c.lane_id = l.id "
                          "where m.kind = 'sweep'"))
    assert got == {"fake_segfault": "crashed", "fake_hang": "timeout",
                   "fake_garbage": "wrong_result", "fake_untouched": "untouched",
                   "fake_nan": "nan", "fake_broken_build": "compile_failed",
                   "fake_exit": "crashed", "numpy": "ok"}
    logs = dict(_rows(env, "select l.name, m.log from measurements m join candidates c on "
                           "m.candidate_id = c.id join lanes l on c.lane_id = l.id"))
    assert "SIGSEGV" in logs["fake_segfault"] and "expected ';'" in logs["fake_broken_build"]
    assert "no result after 3 s" in logs["fake_hang"]


def test_a_lane_whose_clock_breaks_the_rules_never_wins(env):
    # a finalist whose re-timing turns NaN (it was the fastest in the sweep) is out
    [row] = arbiter.tune(REGION, db=env, trials=20, lanes=["fake_bad_clock", "numpy"])
    got = dict(_rows(env, "select json_extract(c.config, '$.clock'), m.status || ' ' || m.log "
                          "from measurements m join candidates c on m.candidate_id = c.id "
                          "where m.kind = 'sweep' and c.config like '%clock%'"))
    for clock, text in (("nan", "nan"), ("negative", "-0.001"), ("empty", "no samples")):
        assert got[clock].startswith("launch_failed") and text in got[clock], got[clock]
    assert got["ok"].startswith("ok") and got["nan_later"].startswith("ok")
    [final] = _rows(env, "select m.status from measurements m join candidates c on "
                         "m.candidate_id = c.id where m.kind = 'final' and c.config like "
                         "'%nan_later%'")
    assert final == ("launch_failed",)
    assert row["config"] != {"clock": "nan_later"} and 0 < row["latency_ms"] < 1e3
    assert arbiter.best(REGION, db=env)["config"] == row["config"]


def test_the_true_fastest_wins_every_region_every_time_under_adversarial_noise(env):
    # known latencies, noise that only adds time: rare 20x outliers on the fastest, a slow
    # very noisy exact one, a near bimodal exact one (fake_lanes.Adversary). Neither the
    # noise nor a lower error may move the win.
    regions = [FusedRegion(8 + i, 16, 8, name=f"r{i}", epilogue=("bias",)) for i in range(12)]
    for sweep in range(3):
        db = env.replace(".db", f"{sweep}.db")
        rows = arbiter.tune(regions, db=db, trials=4, lanes=["fake_adversary"], timing=QUICK)
        for row in rows:
            assert row["config"] == {"kind": "fast"}, row
            assert row["latency_ms"] == pytest.approx(1.0, rel=0.01)
            ru = row["runner_up"]
            assert ru["config"] != {"kind": "fast"} and ru["latency_ms"] > row["latency_ms"]
            assert row["status"] == "ok" and row["verdict"] == "faster" and ru["ratio_low"] > 1


def test_a_winner_is_never_slower_than_its_runner_up_and_a_tie_goes_to_the_faster(env):
    # fake_tiny's best two differ by 15%: inside a 50% band they are a tie, and the faster
    # one still wins; the stored latencies say so
    [row] = arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], equivalence=0.5,
                         timing=QUICK)
    assert row["status"] == "tie" and row["tie"] and row["verdict"] == "tie"
    assert row["config"] == {"block": 4, "unroll": 2, "fast": False}
    assert row["runner_up"]["latency_ms"] >= row["latency_ms"]


def test_small_space_is_enumerated_once_and_never_remeasured(env):
    [row] = arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1, timing=QUICK)
    assert row["config"] == {"block": 4, "unroll": 2, "fast": False}
    counts = _sweep_counts(env)
    assert len(counts) == 18 and all(n == 1 for _, n in counts)  # every valid config, once
    emit_refused = _rows(env, "select count(*) from measurements where status = 'invalid'")
    assert emit_refused == [(1,)]  # block=8 unroll=1 fast=True: emit refuses it
    [again] = arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=2)
    assert again["new_trials"] == 0 and again["config"] == row["config"]
    assert again["latency_ms"] == row["latency_ms"]  # the declared winner, not re-timed
    assert _sweep_counts(env) == counts


def test_sampled_search_records_rule_breakers_as_invalid_without_building(env):
    [row] = arbiter.tune(REGION, db=env, trials=12, lanes=["fake_tiny"], seed=3,
                         sampler="random", timing=QUICK)
    counts = _sweep_counts(env)
    assert all(n == 1 for _, n in counts) and row["new_trials"] == len(counts)
    logs = [r[0] for r in _rows(env, "select log from measurements where status = 'invalid'")]
    assert any("block * unroll <= 8" in log for log in logs)
    # refused configs cost no build and do not use up the budget: 12 candidates really ran
    [(ran,)] = _rows(env, "select count(*) from measurements where status != 'invalid' "
                          "and kind = 'sweep'")
    assert ran == 12 and len(counts) == 12 + len(logs)


def _candidates_of(url: str) -> set[str]:
    return {c for (c,) in _rows(url, "select config from candidates")}


def test_a_seed_repeats_the_random_draws_on_fresh_records(env, tmp_path):
    other = f"sqlite:///{tmp_path / 'other.db'}"
    for url in (env, other):
        arbiter.tune(REGION, db=url, trials=8, lanes=["fake_tiny"], seed=7, sampler="random",
                     timing=QUICK)
    assert _candidates_of(env) == _candidates_of(other)


def test_budget_at_query_time_answers_from_records(env):
    arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1, timing=QUICK)
    before = _rows(env, "select count(*) from measurements")
    loose = arbiter.best(REGION, budget=5e-3, db=env)
    assert loose["config"]["fast"] is True and loose["rel_error"] > 1e-3
    assert loose["source"] == "records"
    assert loose["latency_ms"] < arbiter.best(REGION, db=env)["latency_ms"]
    with pytest.raises(ArbiterError, match="no recorded candidate within budget 1e-12"):
        arbiter.best(REGION, budget=1e-12, db=env)
    assert _rows(env, "select count(*) from measurements") == before


def test_an_answer_from_the_records_shows_a_finalists_latency_from_its_rounds(env):
    arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1, timing=QUICK)
    declared = arbiter.best(REGION, db=env)
    # the over-budget configs (fast=True) let in at 5e-3 are made slow: the answer, from the
    # records, is the declared winner again, with the latency its interleaved rounds gave
    con = sqlite3.connect(env.removeprefix("sqlite:///"))
    con.execute("update measurements set latency = 1 where candidate_id in "
                "(select id from candidates where json_extract(config, '$.fast'))")
    con.commit()
    con.close()
    loose = arbiter.best(REGION, budget=5e-3, db=env)
    assert loose["source"] == "records" and loose["config"] == declared["config"]
    assert loose["latency_ms"] == declared["latency_ms"]
    # its runner-up, a finalist too, with its rounds' latency: never faster than the winner
    assert loose["runner_up"]["latency_ms"] == pytest.approx(declared["runner_up"]["latency_ms"])
    assert loose["runner_up"]["latency_ms"] >= loose["latency_ms"]


def test_a_tighter_budget_keeps_the_declared_winner_over_the_sweeps_latencies(env):
    arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1, timing=QUICK)
    declared = arbiter.best(REGION, db=env)
    # another candidate's sweep latency ranked first (the finalists' interleaved rounds can
    # rank them otherwise): every candidate within 1e-4 was within the sweep's budget, so the
    # winner chosen over them all stands
    con = sqlite3.connect(env.removeprefix("sqlite:///"))
    con.execute("update measurements set latency = 1e-9 where kind = 'sweep' and candidate_id ="
                " (select c.id from candidates c join measurements m on m.candidate_id = c.id "
                "where m.status = 'ok' and c.config like '%\"block\":1%' limit 1)")
    con.commit()
    con.close()
    tight = arbiter.best(REGION, budget=1e-4, db=env)
    assert tight["source"] == "winner" and tight["config"] == declared["config"]
    assert tight["latency_ms"] == declared["latency_ms"] and tight["budget"] == 1e-4
    # a looser one lets in what the sweep's budget kept out: answered from the records
    loose = arbiter.best(REGION, budget=5e-3, db=env)
    assert loose["source"] == "records" and loose["config"]["block"] == 1


def test_the_api_reads_lanes_given_as_one_string_and_refuses_a_name_for_a_region(env):
    [row] = arbiter.tune(REGION, db=env, trials=2, lanes="fake_tiny, numpy", seed=1)
    assert row["lane"] in ("fake_tiny", "numpy")
    assert {r for (r,) in _rows(env, "select name from lanes")} == {"fake_tiny", "numpy"}
    with pytest.raises(ArbiterError, match="best\\(\\) takes a region"):
        arbiter.best("small", db=env)


def test_a_winner_stands_for_another_budget_only_over_what_it_was_chosen_from():
    from arbiter.choose import winner_that_stands
    from arbiter.lane import Status
    from arbiter.records import Result

    def result(i: int, error: float, latency: float, at: int) -> Result:
        return Result(i, "fake_tiny", Config.of({"block": i}), Status.OK, error, error, latency,
                      None, None, 0.0, False, None, 1e-3, measured_at=at)  # type: ignore[arg-type]

    results = [result(1, 1e-7, 2e-3, 1), result(2, 1e-7, 1e-3, 2), result(3, 5e-4, 5e-4, 15)]
    declared = {"candidate_id": 2, "declared_at": 10, "runner_up": None, "tie": False,
                "budget": 1e-3}
    # tighter: the winner was chosen over both candidates still in
    assert winner_that_stands([declared], results, 1e-4) is declared
    # 3 is in too, but was measured after the declaration: it never met the winner
    assert winner_that_stands([declared], results, 6e-4) is None
    assert winner_that_stands([{**declared, "declared_at": 30}], results, 6e-4) is not None
    # looser: 3 fits, but not the winner's own budget (1e-4)
    assert winner_that_stands([{**declared, "budget": 1e-4}], results, 1e-3) is None
    # a winner that does not fit the budget asked never stands
    assert winner_that_stands([{**declared, "candidate_id": 3}], results, 1e-4) is None


def test_regions_given_as_an_iterator_are_all_tuned(env):
    [row] = arbiter.tune(iter([REGION]), db=env, trials=3, lanes=["fake_tiny"], seed=1)
    assert row["region"] == "small" and row["lane"] == "fake_tiny"


def test_never_tuned_region_says_so(env):
    arbiter.tune(REGION, db=env, trials=1, lanes=["numpy"])
    with pytest.raises(ArbiterError, match="never tuned"):
        arbiter.best(FusedRegion(3, 3, 3, name="other"), db=env)


def _tuned_elsewhere(env, monkeypatch) -> None:
    import arbiter.records

    real = arbiter.records.fingerprint
    monkeypatch.setattr(arbiter.records, "fingerprint",
                        lambda: Fingerprint({"cpu": "elsewhere"}))
    arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1, timing=QUICK)
    monkeypatch.setattr(arbiter.records, "fingerprint", real)


def test_winner_from_another_machine_is_reverified(env, monkeypatch):
    _tuned_elsewhere(env, monkeypatch)
    got = arbiter.best(REGION, db=env)
    assert got["source"] == "reverified" and got["config"]["block"] == 4
    assert got["measured_on"] == Fingerprint({"cpu": "elsewhere"}).hash
    assert _rows(env, "select count(*) from measurements where kind = 'verify'") == [(1,)]
    arbiter.best(REGION, db=env)  # verified once, then trusted on this machine
    assert _rows(env, "select count(*) from measurements where kind = 'verify'") == [(1,)]


def test_reverification_tries_configs_of_this_machines_space_and_the_winner_first(
        env, monkeypatch):
    from arbiter.lane import Space, Tunable

    _tuned_elsewhere(env, monkeypatch)
    # here the space has no block=4 (as x86_c has no threads=2 on one CPU): the three fastest
    # configs recorded there are not configs here, and are passed over, not counted as tries
    narrow = Space((Tunable("block", (1, 8), 1), Tunable("unroll", (1, 2, 4), 1),
                    Tunable("fast", (False, True), False)))
    wide = fake_lanes.Tiny.space
    monkeypatch.setattr(fake_lanes.Tiny, "space", lambda self, region: narrow)
    got = arbiter.best(REGION, db=env)
    assert got["source"] == "reverified" and narrow.violation(Config.of(got["config"])) is None
    # the winner declared there is tried first, whatever the sweep's latencies said
    monkeypatch.setattr(fake_lanes.Tiny, "space", wide)
    con = sqlite3.connect(env.removeprefix("sqlite:///"))
    con.execute("delete from measurements where kind = 'verify'")
    con.execute("update measurements set latency = 1e-9 where kind = 'sweep' and candidate_id ="
                " (select c.id from candidates c join measurements m on m.candidate_id = c.id "
                "where m.status = 'ok' and c.config like '%\"block\":1%' limit 1)")
    con.commit()
    con.close()
    got = arbiter.best(REGION, db=env)
    assert got["source"] == "reverified" and got["config"]["block"] == 4


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs this process may use")
def test_a_narrower_cpu_set_is_another_environment(env):
    # latencies measured with every CPU are not this process's when it is held to one (taskset,
    # a smaller container): it measures afresh, within its own thread counts
    region = FusedRegion(4, 8, 4, name="tiny_c", epilogue=("relu",))
    arbiter.tune(region, db=env, trials=3, lanes=["x86_c"], seed=1)
    cpu = min(os.sched_getaffinity(0))
    code = (f"import json, os, arbiter; os.sched_setaffinity(0, {{{cpu}}}); "
            "r = arbiter.FusedRegion(4, 8, 4, name='tiny_c', epilogue=('relu',)); "
            f"[t] = arbiter.tune(r, db={env!r}, trials=3, lanes=['x86_c'], seed=1); "
            f"b = arbiter.best(r, db={env!r}); "
            "print(json.dumps([t['new_trials'], t['config']['threads'], b['source'], "
            "b['config']['threads']]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    new, threads, source, served = json.loads(out.stdout.splitlines()[-1])
    assert new > 0 and threads == served == 1 and source == "winner"
    assert _rows(env, "select count(*) from environments") == [(2,)]
    assert arbiter.best(region, db=env)["source"] == "winner"


def test_run_without_lane_uses_the_recorded_winner(env):
    arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1, timing=QUICK)
    inputs = arbiter.random_inputs(REGION, 5)
    out = arbiter.run(REGION, db=env, **inputs)
    ref = arbiter.reference(REGION, inputs)
    assert arbiter.compare(out, ref, 1e-3).status.value == "ok"


def test_a_finalist_that_left_the_rounds_early_is_neither_winner_nor_runner_up():
    from arbiter import Measurement
    from arbiter.choose import decide
    from arbiter.lane import Status
    from arbiter.records import Result

    def final(i: int, samples: list[float]) -> tuple[Result, Measurement]:
        m = Measurement(Status.OK, 1e-7, 1e-7, tuple(samples))
        e = m.estimate
        return Result(i, "x", Config.of(k=i), Status.OK, 1e-7, 1e-7, e.latency, e.low, e.high,
                      e.spread, False, None, 1e-3), m

    # the machine slowed after the early one left: its early rounds look fastest
    early = final(1, [1.15] * 30)
    a, b = final(2, [1.0] * 30 + [1.4] * 90), final(3, [1.1] * 30 + [1.5] * 90)
    choice = decide([early, a, b])
    assert (choice.winner.candidate_id, choice.runner_up.candidate_id) == (2, 3)


def test_the_finalists_are_the_fastest_three_and_each_vendor_lanes_best():
    from arbiter.choose import finalists
    from arbiter.lane import Status
    from arbiter.records import Result

    def result(i: int, lane: str, latency: float | None, error: float = 1e-6) -> Result:
        return Result(i, lane, Config.of(k=i), Status.OK, error, error, latency, None, None,
                      0.0, False, None, 1e-3)

    results = [result(1, "x86_c", 3.0), result(2, "x86_c", 1.0), result(3, "numpy", 9.0),
               result(4, "x86_c", 2.0), result(5, "numpy", 8.0), result(6, "x86_c", 0.5, 1.0),
               result(7, "x86_c", 4.0), result(8, "x86_c", None)]
    assert [r.candidate_id for r in finalists(results, 1e-3)] == [2, 4, 1, 5]
    assert [r.candidate_id for r in finalists(results, 2.0)] == [6, 2, 4, 5]


def test_finalists_are_retimed_in_the_same_rounds_and_the_winner_recorded(env):
    [row] = arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny", "numpy"],
                         timing=QUICK)
    finals = _rows(env, "select l.name, m.samples from measurements m join candidates c on "
                        "c.id = m.candidate_id join lanes l on l.id = c.lane_id "
                        "where m.kind = 'final'")
    assert "numpy" in [name for name, _ in finals] and len(finals) in (3, 4)
    assert len({len(json.loads(s)) for _, s in finals}) == 1  # the same rounds, each
    [(latency, verdict, ratio, runner_up)] = _rows(
        env, "select latency, verdict, ratio, runner_up_id from winners")
    assert latency * 1e3 == row["latency_ms"] and verdict == row["verdict"]
    assert runner_up is not None and ratio >= 1


def test_every_lanes_default_is_measured_first(env):
    # with as many trials as lanes, the sampler never gets a turn: each lane's default (the
    # vendor library included) is what gets measured
    lanes = ["fake_tiny", "numpy"]
    arbiter.tune(REGION, db=env, trials=2, lanes=lanes, seed=3)
    got = _rows(env, "select l.name, c.config from candidates c join lanes l on c.lane_id = l.id")
    configs = {name: json.loads(cfg) for name, cfg in got}
    assert set(configs) == set(lanes)
    assert configs["fake_tiny"] == arbiter.get_lane("fake_tiny").space(REGION).default.as_dict()


def _db_study(url: str):
    import optuna

    from arbiter.cli.export import export_optuna

    export_optuna(url)
    [summary] = optuna.get_all_study_summaries(storage=url)
    return optuna.load_study(study_name=summary.study_name, storage=url)


def _candidates(url: str) -> list[int]:
    """The candidates that were built and run (rule breakers are left out of the study)."""
    return sorted(cid for (cid,) in _rows(url, "select candidate_id from measurements where "
                                               "kind = 'sweep' and status != 'invalid'"))


def test_the_exported_study_holds_each_measured_candidate_once(env):
    from optuna.trial import TrialState

    arbiter.tune(REGION, db=env, trials=9, lanes=["fake_tiny"], seed=4, timing=QUICK)
    assert not _rows(env, "select name from sqlite_master where name = 'trials'")  # not yet
    study = _db_study(env)
    done = study.get_trials(states=(TrialState.COMPLETE,))
    ids = [t.user_attrs["candidate"] for t in done]
    # what optuna-dashboard shows: every candidate built and run, once, with the accuracy
    # constraint the samplers read and the recorded latency as the value
    assert sorted(ids) == _candidates(env) and len(study.trials) == len(done)
    assert "small" in study.study_name
    latency = dict(_rows(env, "select c.id, m.latency from candidates c join measurements m "
                              "on m.candidate_id = c.id where m.kind = 'sweep'"))
    for t in done:
        cid = t.user_attrs["candidate"]
        assert "accuracy" in t.constraints
        assert t.value == pytest.approx(latency[cid] * 1e3) if latency[cid] else t.value > 1e300
        assert t.params["lane"] == "fake_tiny" and "fake_tiny.block" in t.params
    arbiter.tune(REGION, db=env, trials=12, lanes=["fake_tiny"], seed=5, timing=QUICK)
    ids = [t.user_attrs["candidate"] for t in _db_study(env).trials]
    assert sorted(ids) == _candidates(env)


def _children() -> set[str]:
    me, python = os.getpid(), Path(sys.executable).name[:15]  # (the kernel keeps 15)
    return {str(p.pid) for p in every() if p.ppid == me and p.name == python}


@pytest.mark.parametrize("bad", [{"lanes": ["no_such_lane"]}, {"trials": 0},
                                 {"timeout": -1}, {"sampler": "no_such_sampler"}])
def test_a_refused_tune_leaves_no_worker_behind(env, bad):
    before = _children()
    with pytest.raises(ArbiterError):
        arbiter.tune(REGION, db=env, **bad)
    assert _children() == before


def test_a_database_deleted_between_sweeps_gets_the_next_sweeps_records(env):
    # a notebook: tune, delete the file, tune again in the same process; pooled connections
    # to the deleted file would take every record of the second sweep with it
    path = env.removeprefix("sqlite:///")
    arbiter.tune(REGION, db=env, trials=9, lanes=["fake_tiny"], seed=4, timing=QUICK)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    [row] = arbiter.tune(REGION, db=env, trials=9, lanes=["fake_tiny"], seed=5, timing=QUICK)
    measured = _rows(env, "select count(*) from measurements where kind = 'sweep' "
                          "and status != 'invalid'")
    assert measured == [(9,)] and row["lane"] == "fake_tiny"
    ids = [t.user_attrs["candidate"] for t in _db_study(env).trials]
    assert sorted(ids) == _candidates(env)


def test_an_unstable_candidate_is_measured_again_and_flagged(env):
    [row] = arbiter.tune(REGION, db=env, trials=1, lanes=["fake_wobbly"], timing=QUICK)
    assert row["unstable"] and row["lane"] == "fake_wobbly"
    [(samples,)] = _rows(env, "select samples from measurements where kind = 'sweep'")
    assert len(json.loads(samples)) == 2 * QUICK.rounds * 3  # timed twice, both kept
    assert arbiter.best(REGION, db=env)["unstable"]


def test_a_busy_machine_is_waited_for_and_said_once(env, capfd):
    if not os.path.exists("/proc/stat"):
        pytest.skip("the load is read from Linux's /proc")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in os.sched_getaffinity(0)]
    try:
        arbiter.tune(RowwiseRegion(8, 16, epilogue=("relu",)), db=env, trials=3,
                     lanes=["fake_tiny"], timing=Timing(wait=0.2))
    finally:
        for p in busy:
            p.kill()
            p.wait()
    err = capfd.readouterr().err
    assert err.count("the machine is busy") == 1, err
    loads = [x for (x,) in _rows(env, "select load from measurements where kind = 'sweep' "
                                      "and latency is not null")]
    assert loads and all(x is not None and x > 0.2 for x in loads)


def test_a_finalist_that_crashes_only_in_the_rounds_is_found_and_the_others_decided(env):
    # fake_flaky_rounds' block=4 configs pass the sweep and die in the finalists' rounds
    [row] = arbiter.tune(REGION, db=env, trials=100, lanes=["fake_flaky_rounds"], timing=QUICK)
    assert row["lane"] == "fake_flaky_rounds" and row["config"]["block"] != 4
    finals = _rows(env, "select json_extract(c.config, '$.block'), m.status from measurements m"
                        " join candidates c on c.id = m.candidate_id where m.kind = 'final'")
    assert {s for b, s in finals if b == 4} == {"crashed"}
    assert {s for b, s in finals if b != 4} == {"ok"}
    # the crashing one is not served from the records either
    assert arbiter.best(REGION, budget=2e-3, db=env)["config"]["block"] != 4


def test_another_equivalence_band_decides_the_winner_again(env):
    [first] = arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], timing=QUICK)
    assert first["verdict"] == "faster"  # the best two differ by 30%
    [again] = arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], equivalence=0.5,
                           timing=QUICK)
    assert again["new_trials"] == 0 and again["verdict"] == "tie"
    assert _rows(env, "select band from winners") == [(0.5,)]


def test_a_broken_plug_in_is_left_out_of_every_lane_and_named_it_is_one_line(env, monkeypatch,
                                                                             capsys):
    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes("fake_tiny")
                       + ",broken=no_such_module:lane,notalane=os:path")
    [row] = arbiter.tune(REGION, db=env, trials=2, timing=QUICK)
    assert row["lane"] in ("fake_tiny", "numpy", "x86_c")
    err = capsys.readouterr().err
    assert "lane 'broken' (no_such_module:lane) failed to load" in err
    assert "lane 'notalane' (os:path) is not a lane" in err
    for name in ("broken", "notalane"):
        with pytest.raises(ArbiterError, match=f"lane '{name}'"):
            arbiter.tune(REGION, db=env, lanes=[name])


def test_on_region_sees_each_row_as_its_region_is_declared(env):
    # called between regions: the region just declared is best's answer, the next is not yet
    # recorded (best answers it from its tuned neighbour)
    regions = [FusedRegion(8 + i, 16, 8, name=f"r{i}", epilogue=("bias",)) for i in range(2)]
    seen = []

    def on_region(row):
        now = arbiter.best(regions[len(seen)], db=env)
        later = arbiter.best(regions[1], db=env) if not seen else None
        seen.append((row, now, later))

    rows = arbiter.tune(regions, db=env, trials=3, lanes=["fake_adversary"], timing=QUICK,
                        on_region=on_region)
    assert [row for row, _, _ in seen] == rows
    assert [now["config"] for _, now, _ in seen] == [row["config"] for row in rows]
    assert all(now["source"] == "winner" for _, now, _ in seen)
    assert seen[0][2]["source"] == "nearest"
