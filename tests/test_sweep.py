"""The sweep: failing candidates become recorded statuses, small spaces are enumerated, nothing
is measured twice, budgets change at query time, foreign winners are re-verified."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import arbiter
from arbiter import ArbiterError, Config, FusedRegion
from arbiter._fingerprint import Fingerprint
from tests import fake_lanes
from tests.procs import every, rss_mb, soon

REGION = FusedRegion(8, 16, 8, name="small", epilogue=("bias", "relu"))
FAILING = ["fake_segfault", "fake_hang", "fake_garbage", "fake_untouched", "fake_nan",
           "fake_broken_build", "fake_exit"]


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
    assert row["lane"] == "numpy" and row["status"] in ("ok", "tie")
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
    # a plugin lane's own `time`: NaN, negative or no samples are a failed launch, recorded
    # with what it returned; a finalist whose re-timing turns NaN is out of the final
    [row] = arbiter.tune(REGION, db=env, trials=20, lanes=["fake_bad_clock", "numpy"])
    got = dict(_rows(env, "select json_extract(c.config, '$.clock'), m.status || ' ' || m.log "
                          "from measurements m join candidates c on m.candidate_id = c.id "
                          "where m.kind = 'sweep' and c.config like '%clock%'"))
    for clock, text in (("nan", "nan"), ("negative", "-0.001"), ("empty", "no samples")):
        assert got[clock].startswith("launch_failed") and text in got[clock], got[clock]
    assert got["ok"].startswith("ok") and got["nan_later"].startswith("ok")
    assert got["array"].startswith("ok")
    [final] = _rows(env, "select m.status from measurements m join candidates c on "
                         "m.candidate_id = c.id where m.kind = 'final' and c.config like "
                         "'%nan_later%'")
    assert final == ("launch_failed",)
    assert row["config"] != {"clock": "nan_later"} and 0 < row["latency_ms"] < 1e3
    assert arbiter.best(REGION, db=env)["config"] == row["config"]


@pytest.mark.parametrize("lane, status", [("fake_spawn_hang", "timeout"),
                                          ("fake_spawn_crash", "crashed")])
def test_what_a_failed_kernel_started_goes_with_its_worker(env, tmp_path, monkeypatch, lane,
                                                           status):
    from tests.procs import proc

    log = tmp_path / "spawned"
    monkeypatch.setenv("FAKE_SPAWN_LOG", str(log))
    [row] = arbiter.tune(REGION, db=env, trials=3, lanes=[lane, "numpy"], timeout=2)
    assert row["lane"] == "numpy"
    assert (lane, status) in _rows(env, "select l.name, m.status from measurements m join "
                                        "candidates c on m.candidate_id = c.id join lanes l "
                                        "on c.lane_id = l.id")
    spawned = [int(x) for x in log.read_text().split()]
    assert spawned and soon(lambda: all(
        (p := proc(pid)) is None or p.state == "Z" or p.name != "sleep" for pid in spawned))


def test_small_space_is_enumerated_once_and_never_remeasured(env):
    [row] = arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1)
    assert row["config"] == {"block": 4, "unroll": 2, "fast": False}
    counts = _sweep_counts(env)
    assert len(counts) == 18 and all(n == 1 for _, n in counts)  # every valid config, once
    emit_refused = _rows(env, "select count(*) from measurements where status = 'invalid'")
    assert emit_refused == [(1,)]  # block=8 unroll=1 fast=True: emit refuses it
    [again] = arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=2)
    assert again["new_trials"] == 0 and again["config"] == row["config"]
    assert _sweep_counts(env) == counts


def test_sampled_search_records_rule_breakers_as_invalid_without_building(env):
    [row] = arbiter.tune(REGION, db=env, trials=12, lanes=["fake_tiny"], seed=3,
                         sampler="random")
    counts = _sweep_counts(env)
    assert all(n == 1 for _, n in counts) and row["new_trials"] == len(counts)
    logs = [r[0] for r in _rows(env, "select log from measurements where status = 'invalid'")]
    assert any("block * unroll <= 8" in log for log in logs)
    # refused configs cost no build and do not use up the budget: 12 candidates really ran
    [(ran,)] = _rows(env, "select count(*) from measurements where status != 'invalid' "
                          "and kind = 'sweep'")
    assert ran == 12 and len(counts) == 12 + len(logs)
    # the study is in the same database, one trial per ask
    [(n_trials,)] = _rows(env, "select count(*) from trials")
    assert n_trials >= 12


def test_budget_at_query_time_answers_from_records(env):
    arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1)
    before = _rows(env, "select count(*) from measurements")
    loose = arbiter.best(REGION, budget=5e-3, db=env)
    assert loose["config"]["fast"] is True and loose["rel_error"] > 1e-3
    assert loose["latency_ms"] < arbiter.best(REGION, db=env)["latency_ms"]
    with pytest.raises(ArbiterError, match="no recorded candidate within budget 1e-12"):
        arbiter.best(REGION, budget=1e-12, db=env)
    assert _rows(env, "select count(*) from measurements") == before


def test_a_tighter_budget_keeps_the_declared_winner_over_the_sweeps_medians(env):
    arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1)
    declared = arbiter.best(REGION, db=env)
    # another candidate's sweep median ranked first (the finalists' interleaved re-timing
    # can rank them otherwise): every candidate within 1e-4 was within the sweep's budget, so
    # the winner chosen over them all stands
    con = sqlite3.connect(env.removeprefix("sqlite:///"))
    con.execute("update measurements set median = 1e-9 where kind = 'sweep' and candidate_id = "
                "(select c.id from candidates c join measurements m on m.candidate_id = c.id "
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
    from arbiter._records import Result
    from arbiter._tune import _winner_that_stands
    from arbiter._values import Status

    def result(i: int, error: float, median: float) -> Result:
        return Result(i, "fake_tiny", Config.of({"block": i}), Status.OK, error, error,
                      median, 0.0, 1e-3)

    results = [result(1, 1e-7, 2e-3), result(2, 1e-7, 1e-3), result(3, 5e-4, 5e-4)]
    declared = {"candidate_id": 2, "declared_at": 10, "runner_up": None, "tie": False}

    def since(when):  # candidate 3 was measured by a later sweep
        return {3} if when < 20 else set()

    # tighter: the winner was chosen over both candidates still in
    assert _winner_that_stands([(1e-3, declared)], results, 1e-4, since) is declared
    # 3 is in too, but was measured after the declaration: it never met the winner
    assert _winner_that_stands([(1e-3, declared)], results, 6e-4, since) is None
    assert _winner_that_stands([(1e-3, {**declared, "declared_at": 30})], results, 6e-4,
                               since) is not None
    # looser: 3 fits, but not the winner's own budget (1e-4)
    assert _winner_that_stands([(1e-4, declared)], results, 1e-3, lambda when: set()) is None
    # a winner that does not fit the budget asked never stands
    assert _winner_that_stands([(1e-3, {**declared, "candidate_id": 3})], results, 1e-4,
                               lambda when: set()) is None


def test_regions_given_as_an_iterator_are_all_tuned(env):
    [row] = arbiter.tune(iter([REGION]), db=env, trials=3, lanes=["fake_tiny"], seed=1)
    assert row["region"] == "small" and row["lane"] == "fake_tiny"


def test_the_collector_runs_during_the_trials_and_is_left_as_the_caller_had_it(env):
    import gc

    # held off during the sweep's start-up only
    seen = []
    arbiter.tune(REGION, db=env, trials=3, lanes=["fake_tiny"], seed=1,
                 on_trial=lambda *_: seen.append(gc.isenabled()))
    assert seen and all(seen) and gc.isenabled()
    with pytest.raises(ArbiterError):
        arbiter.tune(REGION, db=env, lanes=["nope"])
    assert gc.isenabled()
    gc.disable()  # the caller's own choice stands
    try:
        arbiter.tune(REGION, db=env, trials=4, lanes=["fake_tiny"], seed=1,
                     on_trial=lambda *_: seen.append(gc.isenabled()))
        assert not gc.isenabled() and seen[-1] is False
    finally:
        gc.enable()


def test_never_tuned_region_says_so(env):
    arbiter.tune(REGION, db=env, trials=1, lanes=["numpy"])
    with pytest.raises(ArbiterError, match="never tuned"):
        arbiter.best(FusedRegion(3, 3, 3, name="other"), db=env)


def test_winner_from_another_machine_is_reverified(env, monkeypatch):
    import arbiter._tune as tune_mod

    real = tune_mod.fingerprint
    monkeypatch.setattr(tune_mod, "fingerprint", lambda: Fingerprint({"cpu": "elsewhere"}))
    arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1)
    monkeypatch.setattr(tune_mod, "fingerprint", real)
    got = arbiter.best(REGION, db=env)
    assert got["source"] == "reverified" and got["config"]["block"] == 4
    assert got["measured_on"] == Fingerprint({"cpu": "elsewhere"}).hash
    assert _rows(env, "select count(*) from measurements where kind = 'verify'") == [(1,)]
    arbiter.best(REGION, db=env)  # verified once, then trusted on this machine
    assert _rows(env, "select count(*) from measurements where kind = 'verify'") == [(1,)]


def test_reverification_tries_configs_of_this_machines_space_and_the_winner_first(
        env, monkeypatch):
    import arbiter._tune as tune_mod
    from arbiter._values import Space, Tunable
    from tests import fake_lanes

    real = tune_mod.fingerprint
    monkeypatch.setattr(tune_mod, "fingerprint", lambda: Fingerprint({"cpu": "elsewhere"}))
    arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1)
    monkeypatch.setattr(tune_mod, "fingerprint", real)
    # here the space has no block=4 (as x86_c has no threads=2 on one CPU): the three fastest
    # configs recorded there are not configs here, and are passed over, not counted as tries
    narrow = Space((Tunable("block", (1, 8), 1), Tunable("unroll", (1, 2, 4), 1),
                    Tunable("fast", (False, True), False)))
    wide = fake_lanes.Tiny.space
    monkeypatch.setattr(fake_lanes.Tiny, "space", lambda self, region: narrow)
    got = arbiter.best(REGION, db=env)
    assert got["source"] == "reverified" and narrow.violation(Config.of(got["config"])) is None
    # the winner declared there is tried first, whatever the sweep's medians said
    monkeypatch.setattr(fake_lanes.Tiny, "space", wide)
    con = sqlite3.connect(env.removeprefix("sqlite:///"))
    con.execute("delete from measurements where kind = 'verify'")
    con.execute("update measurements set median = 1e-9 where kind = 'sweep' and candidate_id = "
                "(select c.id from candidates c join measurements m on m.candidate_id = c.id "
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
                         timeout=120)
    assert out.returncode == 0, out.stderr
    new, threads, source, served = json.loads(out.stdout.splitlines()[-1])
    assert new > 0 and threads == served == 1 and source == "winner"
    assert _rows(env, "select count(*) from environments") == [(2,)]
    assert arbiter.best(region, db=env)["source"] == "winner"


def test_run_without_lane_uses_the_recorded_winner(env):
    arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1)
    inputs = arbiter.random_inputs(REGION, 5)
    out = arbiter.run(REGION, db=env, **inputs)
    ref = arbiter.reference(REGION, inputs)
    assert arbiter.compare(out, ref, 1e-3).status.value == "ok"


def test_finalists_are_retimed_interleaved_and_winner_recorded(env):
    arbiter.tune(REGION, db=env, trials=100, lanes=["fake_tiny"], seed=1)
    finals = _rows(env, "select count(*) from measurements where kind = 'final'")
    assert finals == [(3,)]
    [(tie, runner_up, margin)] = _rows(env, "select tie, runner_up_id, margin from winners")
    assert runner_up is not None and margin > 0 and tie == 0


def test_every_lanes_default_is_measured_first(env):
    # with as many trials as lanes, the sampler never gets a turn: each lane's default (the
    # vendor library included) is what gets measured
    lanes = ["fake_tiny", "numpy"]
    arbiter.tune(REGION, db=env, trials=2, lanes=lanes, seed=3)
    got = _rows(env, "select l.name, c.config from candidates c join lanes l on c.lane_id = l.id")
    import json

    configs = {name: json.loads(cfg) for name, cfg in got}
    assert set(configs) == set(lanes)
    tiny = arbiter.get_lane("fake_tiny")
    assert configs["fake_tiny"] == tiny.space(REGION).default.as_dict()


def _db_study(url: str):
    import optuna

    [summary] = optuna.get_all_study_summaries(storage=url)
    return optuna.load_study(study_name=summary.study_name, storage=url)


def _candidates(url: str) -> list[int]:
    return sorted(cid for (cid,) in _rows(url, "select id from candidates"))


def test_database_study_holds_each_measured_candidate_once(env):
    from optuna.trial import TrialState

    arbiter.tune(REGION, db=env, trials=9, lanes=["fake_tiny"], seed=4)  # 9 of 18: sampled
    study = _db_study(env)
    done = study.get_trials(states=(TrialState.COMPLETE,))
    ids = [t.user_attrs["arbiter"]["candidate"] for t in done]
    # what optuna-dashboard shows: every candidate (rule breakers too, as infeasible), once,
    # with the accuracy constraint the samplers read and the recorded latency as the value
    assert sorted(ids) == _candidates(env) and len(study.trials) == len(done)
    medians = dict(_rows(env, "select c.id, m.median from candidates c join measurements m on "
                              "m.candidate_id = c.id where m.kind = 'sweep'"))
    for t in done:
        cid = t.user_attrs["arbiter"]["candidate"]
        assert "constraints" in t.system_attrs
        assert t.value == pytest.approx(medians[cid] * 1e3) if medians[cid] else t.value > 1e300
        assert t.params["lane"] == "fake_tiny" and "fake_tiny.block" in t.params
    arbiter.tune(REGION, db=env, trials=12, lanes=["fake_tiny"], seed=5)  # three more
    ids = [t.user_attrs["arbiter"]["candidate"] for t in _db_study(env).trials]
    assert sorted(ids) == _candidates(env)


def _children() -> set[str]:
    """This process's trial workers, zombies included: its children running this Python (not,
    say, a version query of the fingerprint's thread, which may outlive a refused `tune` by
    a moment)."""
    me, python = os.getpid(), Path(sys.executable).name[:15]  # (the kernel keeps 15)
    return {str(p.pid) for p in every() if p.ppid == me and p.name == python}


@pytest.mark.parametrize("bad", [{"lanes": ["no_such_lane"]}, {"trials": 0},
                                 {"timeout": -1}, {"sampler": "no_such_sampler"}])
def test_a_refused_tune_leaves_no_worker_behind(env, bad):
    from arbiter import _worker

    # `arbiter.tune` starts its worker before checking anything (its start-up overlaps ours)
    _worker._close_spare()
    before = _children()
    with pytest.raises(ArbiterError):
        arbiter.tune(REGION, db=env, **bad)
    assert _children() == before
    # nor does it end the worker a sweep before it left for the next
    arbiter.tune(REGION, db=env, trials=2, lanes=["fake_tiny"], seed=1)
    before = _children()
    with pytest.raises(ArbiterError):
        arbiter.tune(REGION, db=env, **bad)
    assert _children() == before and _spare_pid() is not None


def _spare_pid() -> int | None:
    from arbiter import _worker

    return _worker._SPARE[0][1].proc.pid if _worker._SPARE else None


def test_the_next_sweep_of_the_process_reuses_the_worker_under_its_own_settings(
        env, tmp_path, monkeypatch):
    region = FusedRegion(4, 8, 4, name="tiny_c", epilogue=("relu",))
    [first] = arbiter.tune(region, db=env, trials=2, lanes=["x86_c"], seed=1)
    pid = _spare_pid()
    assert pid is not None and str(pid) in _children()
    # a new build cache (an ARBITER_* setting): the kept worker builds into it
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache-2"))
    [second] = arbiter.tune(region, db=f"sqlite:///{tmp_path / 'second.db'}", trials=2,
                            lanes=["x86_c"], seed=1)
    assert _spare_pid() == pid
    assert second["lane"] == first["lane"] == "x86_c" and second["status"] in ("ok", "tie")
    assert list((tmp_path / "cache-2").rglob("*.so"))
    # another environment (what the child inherited at its start): a new worker
    monkeypatch.setenv("ARBITER_TEST_UNRELATED", "1")
    monkeypatch.setenv("OTHER_TEST_VARIABLE", "1")
    arbiter.tune(REGION, db=env, trials=3, lanes=["fake_tiny"], seed=2)
    assert _spare_pid() not in (None, pid) and str(pid) not in _children()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPUs this process may use")
def test_a_process_that_narrows_its_cpus_gets_a_new_worker_and_environment(env):
    region = FusedRegion(4, 8, 4, name="tiny_c", epilogue=("relu",))
    arbiter.tune(region, db=env, trials=2, lanes=["x86_c"], seed=1)
    pid = _spare_pid()
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        [row] = arbiter.tune(region, db=env, trials=2, lanes=["x86_c"], seed=1)
        # the kept worker still runs on every CPU: its timings would not be this process's
        assert _spare_pid() not in (None, pid)
    finally:
        os.sched_setaffinity(0, cpus)
    assert row["new_trials"] > 0 and row["config"]["threads"] == 1
    assert _rows(env, "select count(*) from environments") == [(2,)]


def test_a_kept_worker_lets_go_of_the_sweeps_inputs_and_references(env):
    # 8M elements: the check's four input sets and two float64 references take ~0.4 GB
    region = arbiter.RowwiseRegion(2048, 4096, name="big", epilogue=("gelu",), residual=True)
    arbiter.tune(region, db=env, trials=1, lanes=["numpy"])
    pid = _spare_pid()
    assert pid is not None
    # told without waiting for it: it lets go while the caller goes on
    assert soon(lambda: rss_mb(pid) < 200, within=10)


def test_the_first_regions_checks_use_the_seeds_its_cases_were_made_for_at_start_up(
        env, monkeypatch):
    from arbiter import _worker

    named = []
    build_early = _worker.Worker.build_early

    def watched(self, candidates, cases=None):
        if cases is not None:
            named.append((cases[0], list(cases[1])))
        return build_early(self, candidates, cases)

    monkeypatch.setattr(_worker.Worker, "build_early", watched)
    arbiter.tune(REGION, db=env, trials=3, lanes=["fake_tiny"], seed=5)
    [(region, seeds)] = named
    assert region == REGION
    logs = [log for (log,) in _rows(env, "select log from measurements where kind = 'sweep' "
                                         "and status != 'invalid'")]  # those never run
    assert len(logs) >= 2
    assert all(f"seed {seeds[0]}:" in log and f"seed {seeds[1]}:" in log for log in logs)


def test_a_sweep_with_nothing_to_measure_leaves_the_kept_worker_ready_for_the_next_hint(
        env, tmp_path):
    from arbiter import _worker

    arbiter.tune(REGION, db=env, trials=3, lanes=["fake_tiny"], seed=6)
    # tuned already: the start-up hint is sent, no request follows
    arbiter.tune(REGION, db=env, trials=3, lanes=["fake_tiny"], seed=6)
    kept = _worker._SPARE[0][1]
    assert not kept._early and not kept._seeds  # the next sweep may hint, and draws its seeds
    [row] = arbiter.tune(REGION, db=f"sqlite:///{tmp_path / 'next.db'}", trials=3,
                         lanes=["fake_tiny"], seed=6)
    assert row["status"] in ("ok", "tie") and _worker._SPARE[0][1] is kept


def test_a_worker_that_ran_a_gpu_lane_is_not_kept(env):
    arbiter.tune(REGION, db=env, trials=3, lanes=["fake_tiny"], seed=3)
    kept = _spare_pid()
    arbiter.tune(REGION, db=env, trials=3, lanes=["fake_device"], seed=3)
    assert _spare_pid() is None and str(kept) not in _children()


def test_a_database_deleted_between_sweeps_gets_the_next_sweeps_records(env):
    # a notebook: tune, delete the file, tune again in the same process; pooled connections
    # to the deleted file would take every record of the second sweep with it
    path = env.removeprefix("sqlite:///")
    arbiter.tune(REGION, db=env, trials=9, lanes=["fake_tiny"], seed=4)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    [row] = arbiter.tune(REGION, db=env, trials=9, lanes=["fake_tiny"], seed=5)
    assert os.path.exists(path)
    measured = _rows(env, "select count(*) from measurements where kind = 'sweep' "
                          "and status != 'invalid'")
    assert measured == [(9,)] and row["lane"] == "fake_tiny"  # the trial budget, all there
    ids = [t.user_attrs["arbiter"]["candidate"] for t in _db_study(env).trials]
    assert sorted(ids) == _candidates(env)


def _study_lags(url: str, **kw) -> list[int]:
    """Recorded candidates minus the database study's trials, as each trial is recorded."""
    lags = []

    def seen(region, lane, result):
        records = _rows(url, "select count(*) from candidates")[0][0]
        studied = (_rows(url, "select count(*) from trials where state = 'COMPLETE'")[0][0]
                   if _rows(url, "select name from sqlite_master where name = 'trials'") else 0)
        lags.append(records - studied)

    arbiter.tune(REGION, db=url, lanes=["fake_tiny"], on_trial=seen, **kw)
    ids = [t.user_attrs["arbiter"]["candidate"] for t in _db_study(url).trials]
    assert sorted(ids) == _candidates(url)  # all of them, once, when the region is done
    return lags


def test_database_study_is_written_a_batch_at_a_time(env, monkeypatch):
    # optuna-dashboard on a running sweep: its trials come a batch at a time, never more
    # than FLUSH_EVERY (+ the one just recorded) behind the committed records, refused
    # configs (recorded without a worker window) included
    from arbiter import _studies

    monkeypatch.setattr(_studies, "FLUSH_AFTER_S", 1e9)
    lags = _study_lags(env, trials=16, seed=6)
    assert _studies.FLUSH_EVERY <= max(lags) <= _studies.FLUSH_EVERY + 1


def test_database_study_is_written_every_trial_when_trials_are_slow(env, monkeypatch):
    # FLUSH_AFTER_S since the last write: trials slower than that are written one by one, as
    # they are recorded (a lag of 2: the one just recorded and, before the study opens, the
    # first default)
    from arbiter import _studies

    monkeypatch.setattr(_studies, "FLUSH_AFTER_S", 0.0)
    lags = _study_lags(env, trials=16, seed=6)
    assert max(lags) <= 2


def test_a_record_outside_a_window_never_opens_the_database_study(env, monkeypatch):
    # Optuna's storage, opened the first time in a process, loads Alembic and Optuna's
    # models (0.3-0.6 s on 2 busy cores): a late record outside a worker window (one the next
    # candidate waits for, after a result that dropped the proposal asked ahead) leaves the
    # open to the next window; once the study is open, such a record is written at once
    from collections import OrderedDict

    from arbiter import _studies, _study_storage
    from arbiter._plan import Plan
    from arbiter._records import Result
    from arbiter._values import Status

    monkeypatch.setattr(_studies, "FLUSH_AFTER_S", 0.0)  # every record is late
    # as in a fresh process: no storage opened yet (a window would open one at once)
    monkeypatch.setattr(_study_storage, "_STORAGES", OrderedDict())
    lane = arbiter.get_lane("fake_tiny")
    space = lane.space(REGION)
    p = Plan({"fake_tiny": lane}, {"fake_tiny": space}, 18, 18)
    studies = _studies.Studies(env, "outside", p, 1e-3, None)
    studies.flush()  # the region's first window: nothing recorded, nothing to open

    def recorded(i: int, cfg) -> None:
        r = Result(i, "fake_tiny", cfg, Status.OK, 1e-7, 1e-7, lane.latency(cfg), 1e-6, 1e-3)
        p.measured[("fake_tiny", cfg.key)] = r
        studies.recorded(r)  # outside a window

    first, second = [c for c in space.configs() if space.violation(c) is None][:2]
    recorded(1, first)
    assert studies.db is None
    studies.flush()  # the next window
    assert studies.db is not None and not studies.pending
    recorded(2, second)
    assert not studies.pending
    ids = [t.user_attrs["arbiter"]["candidate"] for t in _db_study(env).trials]
    assert ids == [1, 2]


@pytest.mark.parametrize("sampler", ["random", "optuna-tpe"])
def test_asker_one_ahead_never_proposes_what_is_measured_or_in_flight(env, sampler):
    import optuna

    from arbiter._asker import Asker, pool
    from arbiter._plan import Plan
    from arbiter._records import Result
    from arbiter._values import Status

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    lane = arbiter.get_lane("fake_tiny")
    space = lane.space(REGION)
    p = Plan({"fake_tiny": lane}, {"fake_tiny": space}, 18, 18)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)
                                if sampler == "random" else optuna.samplers.TPESampler(seed=0))
    rng = __import__("random").Random(0)
    refused, mirrored = [], []

    def refuse(name, cfg):  # what the search does: record it as invalid, never build it
        r = Result(-1, name, cfg, Status.INVALID, None, None, None, None, 1e-3)
        p.measured[(name, cfg.key)] = r
        refused.append(cfg.key)
        return r

    asker = Asker(study, p, pool(p, rng), rng, 1e-3, refuse=refuse,
                  mirror=lambda t, value, attrs: mirrored.append(t.number))
    nxt, order = asker.next(), []
    while nxt is not None:
        trial, name, cfg = nxt
        key = (name, cfg.key)
        assert space.violation(cfg) is None  # rule breakers never reach the worker
        assert key not in p.measured  # nor anything measured, nor the one asked before
        asker.ask_ahead(key)  # the next one, asked while this one is "in the worker"
        r = Result(len(order), name, cfg, Status.OK, 1e-7, 1e-7, lane.latency(cfg), 1e-6,
                   1e-3)
        p.measured[key] = r
        asker.told(trial, r)
        order.append(key)
        nxt = asker.next()
    # every rule-abiding config, each once; each rule breaker the sampler named recorded once
    assert len(order) == len(set(order)) == 18
    assert refused and len(set(refused)) == len(refused) <= 24 - 18
    # each new result (measured or refused) went to the database study once; repeats were
    # told, never left running; with a model (Optuna's TPE: we cannot tell when it draws at
    # random), a proposal asked ahead of a result among the best was dropped (failed, never
    # measured, never mirrored) and asked again knowing it; a random draw never is
    assert len(mirrored) == len(set(mirrored)) == 18 + len(refused)
    states = {t.state for t in study.trials}
    dropped = {t.number for t in study.trials if t.state is optuna.trial.TrialState.FAIL}
    if sampler == "random":
        assert states == {optuna.trial.TrialState.COMPLETE}
    else:
        assert states == {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL}
        assert dropped and not dropped & set(mirrored)


def test_a_first_proposal_asked_beside_the_last_default_is_the_one_asked_after_it(env):
    # the search asks the sampler's first proposal while the region's last lane default is
    # checked, as far as the sampler would draw at random with that default's result too:
    # what it hands over next is what it would have asked after that result, repeats of
    # measured configs, of the default and refused configs on the way included
    import random

    from arbiter._asker import Asker, pool
    from arbiter._plan import Plan
    from arbiter._records import Result
    from arbiter._samplers import make_study
    from arbiter._studies import _distributions, objective, params
    from arbiter._study_rows import Finished
    from arbiter._values import Status

    lane = arbiter.get_lane("fake_tiny")
    space = lane.space(REGION)
    valid = [c for c in space.configs() if space.violation(c) is None]

    def result(i: int, cfg, status=Status.OK) -> Result:
        ok = status is Status.OK
        return Result(i, "fake_tiny", cfg, status, 1e-7 if ok else None, None,
                      lane.latency(cfg) if ok else None, None, 1e-3)

    def asker(sampler: str, seed: int, before: list):
        p = Plan({"fake_tiny": lane}, {"fake_tiny": space}, 24, 18)
        study = make_study(sampler, seed)

        def add(r: Result) -> None:
            p.measured[("fake_tiny", r.config.key)] = r
            value, attrs = objective(r, 1e-3)
            study.add_trial(Finished(params("fake_tiny", r.config),
                                     _distributions(p, "fake_tiny"), value, attrs).frozen())

        def refuse(name, cfg):
            r = p.measured[(name, cfg.key)] = result(-1, cfg, Status.INVALID)
            return r

        for i, cfg in enumerate(before):
            add(result(i, cfg))
        return Asker(study, p, pool(p, random.Random(seed)), random.Random(seed), 1e-3,
                     refuse=refuse), add

    asked_ahead = 0
    for sampler, startup in (("tpe", 10), ("tpe-startup5", 5)):
        for seed in range(40):
            rng = random.Random(seed)
            before = rng.sample(valid, rng.randrange(startup - 1))
            default = rng.choice([c for c in valid if c not in before])
            r = result(len(before), default)
            after_it, add = asker(sampler, seed, before)
            add(r)
            expected = after_it.next()
            beside_it, add = asker(sampler, seed, before)
            got = beside_it.ask_ahead_of_default("fake_tiny", default)
            beside_it.p.measured[("fake_tiny", default.key)] = r
            if not beside_it.told_default(r):
                add(r)
            assert beside_it.asked_ahead() == (got is not None)
            asked_ahead += got is not None
            handed = beside_it.next()
            assert (handed[1], handed[2]) == (expected[1], expected[2]), (sampler, seed)
            assert got is None or got == (handed[1], handed[2])
            assert not beside_it.waiting
            # the same study: its trials numbered alike, with the same params and results
            for a, b in zip(after_it.study.trials, beside_it.study.trials, strict=True):
                assert (a.number, a.state, a.params) == (b.number, b.state, b.params)
            assert after_it.study._ranked == beside_it.study._ranked
    assert asked_ahead > 40  # most were asked ahead; the rest, once the default was recorded
    # once TPE proper would start with the default's result, none is asked ahead
    late, _ = asker("tpe", 0, valid[:9])
    assert late.ask_ahead_of_default("fake_tiny", valid[9]) is None
    assert not late.told_default(result(9, valid[9]))  # the caller adds it then


def test_a_proposal_asked_ahead_stands_unless_the_result_is_among_tpes_good_trials(env):
    # the default sampler draws from its good trials' mixture: a result outside them leaves
    # the proposal asked without it as it was
    import optuna

    from arbiter._asker import Asker, pool
    from arbiter._plan import Plan
    from arbiter._records import Result
    from arbiter._samplers import make_study
    from arbiter._values import Measurement, Status

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    lane = arbiter.get_lane("fake_tiny")
    space = lane.space(REGION)
    kept, dropped = [], []

    def refuse(name, cfg):
        r = Result(-1, name, cfg, Status.INVALID, None, None, None, None, 1e-3)
        p.measured[(name, cfg.key)] = r
        return r

    for seed in range(6):
        p = Plan({"fake_tiny": lane}, {"fake_tiny": space}, 18, 18)
        study = make_study("tpe", seed)
        rng = __import__("random").Random(seed)
        asker = Asker(study, p, pool(p, rng), rng, 1e-3, refuse=refuse)
        nxt = asker.next()
        while nxt is not None:
            trial, name, cfg = nxt
            asker.ask_ahead((name, cfg.key))
            ahead = asker._ahead[0] if asker._ahead else None
            t = lane.latency(cfg)
            m = Measurement(Status.OK, 1e-7, 1e-7, (t, t, t), "host")
            stands = asker.stands(trial, m)
            r = Result(trial.number, name, cfg, Status.OK, 1e-7, 1e-7, m.median, 0.0, 1e-3)
            p.measured[(name, cfg.key)] = r
            asker.told(trial, r)
            if ahead is not None:
                assert stands == bool(asker._ahead)  # judged alike before and after recording
                good = study.good_now(ahead[0])
                if good is not None:  # (at random still: the rule of thumb, best tenth)
                    assert stands == (trial.number not in good)
                    (kept if stands else dropped).append(trial.number)
            nxt = asker.next()
    assert kept and dropped


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_seed_proposes_the_same_random_draws_whatever_the_timings(env, sampler):
    # `--seed` repeats a search: a random draw does not depend on a result, so none is
    # dropped for one (TPE's own proposals, after its random start, follow the results)
    import optuna

    from arbiter._asker import Asker, pool
    from arbiter._plan import Plan
    from arbiter._records import Result
    from arbiter._samplers import make_study
    from arbiter._values import Measurement, Status

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    lane = arbiter.get_lane("fake_tiny")
    space = lane.space(REGION)

    def proposals(seed: int, latency) -> list[tuple[str, bool]]:
        p = Plan({"fake_tiny": lane}, {"fake_tiny": space}, 16, 16)

        def refuse(name, cfg):
            r = Result(-1, name, cfg, Status.INVALID, None, None, None, None, 1e-3)
            p.measured[(name, cfg.key)] = r
            return r

        study = make_study(sampler, seed)
        at_random = getattr(study, "drawing_at_random", lambda finishing=0: True)
        rng = __import__("random").Random(seed)
        asker = Asker(study, p, pool(p, rng), rng, 1e-3, refuse=refuse)
        out = [(asker.next(), at_random())]
        while out[-1][0] is not None:
            trial, name, cfg = out[-1][0]
            asker.ask_ahead((name, cfg.key))
            # (after its repeats of measured configs, told as finished trials)
            random_next = at_random(finishing=1)
            t = latency(cfg)
            m = Measurement(Status.OK, 1e-7, 1e-7, (t, t, t), "host")
            asker.stands(trial, m)
            r = Result(trial.number, name, cfg, Status.OK, 1e-7, 1e-7, m.median, 0.0, 1e-3)
            p.measured[(name, cfg.key)] = r
            asker.told(trial, r)
            out.append((asker.next(), random_next))
        return [(nxt[2].key, drawn) for nxt, drawn in out if nxt is not None]

    for seed in range(4):
        fast_first = proposals(seed, lane.latency)
        slow_first = proposals(seed, lambda cfg: 1e-6 / lane.latency(cfg))  # ranks reversed
        drawn = [key for key, at_random in fast_first if at_random]
        assert len(drawn) >= 4 and drawn == [key for key, _ in slow_first[:len(drawn)]]
        if sampler == "random":
            assert fast_first == slow_first


def test_database_study_behind_the_records_catches_up_on_the_next_run(env):
    import optuna

    arbiter.tune(REGION, db=env, trials=9, lanes=["fake_tiny"], seed=4)
    name = _db_study(env).study_name
    # as if the sweep had been killed after its last record, before the study's writes
    optuna.delete_study(study_name=name, storage=env)
    [row] = arbiter.tune(REGION, db=env, trials=9, lanes=["fake_tiny"], seed=4)
    assert row["new_trials"] == 0  # nothing measured again
    ids = [t.user_attrs["arbiter"]["candidate"] for t in _db_study(env).trials]
    assert sorted(ids) == _candidates(env)


@pytest.mark.parametrize("own_worker", [False, True])
def test_each_regions_defaults_compile_while_its_first_request_makes_its_references(
        env, monkeypatch, own_worker):
    from arbiter._worker import Worker

    regions = [FusedRegion(8, 16, 8 * i, name=f"r{i}", epilogue=("bias", "relu"))
               for i in (2, 3, 4)] + [REGION]
    seen = []
    check = Worker.check

    def watched(self, lane, region, config, *a, **kw):
        out = check(self, lane, region, config, *a, **kw)
        seen.append((region.name, lane, out.built_ahead_s, out.build_s))
        return out

    monkeypatch.setattr(Worker, "check", watched)
    kw = {"db": env, "trials": 2, "lanes": ["fake_tiny", "x86_c"], "seed": 1}
    if own_worker:  # no hint from `tune` before its start-up: each region's own, first one too
        with Worker(timeout=60) as w:
            rows = arbiter.tune(regions, worker=w, **kw)
    else:
        rows = arbiter.tune(regions, **kw)
    assert all(r["status"] in ("ok", "tie") for r in rows), rows  # a tie: two close latencies
    x86 = [(name, ahead, build) for name, lane, ahead, build in seen if lane == "x86_c"]
    assert [name for name, _, _ in x86] == ["r2", "r3", "r4", "small"]
    # a default built early: part of its compile ran before a request waited for it, and
    # its own request found it done
    assert all(ahead > 0 and build < 0.05 for _, ahead, build in x86), x86
    # the rest of that compile (x86_c's take ~0.1 s or more) is the wait of the region's first
    # request, the vendor default's (a fake lane's own build takes microseconds)
    firsts = {name: build for name, lane, _, build in seen if lane == "fake_tiny"}
    assert all(firsts[name] + ahead > 0.05 for name, ahead, _ in x86), (firsts, x86)


def test_a_listed_first_regions_next_configs_compile_early_and_are_measured_next(
        env, monkeypatch, tmp_path):
    import time

    from arbiter import _api, _tune
    from arbiter._registry import get_lane
    from arbiter._worker import Worker

    monkeypatch.setenv("FAKE_BUILD_SECONDS", "0.05")
    monkeypatch.setenv("FAKE_BUILD_LOG", str(tmp_path / "builds"))
    sweep = _tune._sweep

    def late(*a, **kw):  # a slow start-up: the hinted builds are done before any request
        time.sleep(1.0)
        return sweep(*a, **kw)

    monkeypatch.setattr(_tune, "_sweep", late)
    seen = []
    check = Worker.check

    def watched(self, lane, region, config, *a, **kw):
        out = check(self, lane, region, config, *a, **kw)
        seen.append((config.key, out.built_ahead_s))
        return out

    monkeypatch.setattr(Worker, "check", watched)
    lane = get_lane("fake_slow_build")
    # a budget of 24: the space's 24 combinations, 18 of them allowed, are measured, none sampled
    listed = _api._listed_first(REGION, [lane], 24, 5)
    assert len(listed) == _api.EARLY_LISTED and all(r == REGION for r, _, _ in listed)
    [row] = arbiter.tune(REGION, db=env, trials=24, lanes=["fake_slow_build"], seed=5)
    assert row["new_trials"] == 18
    firsts = [lane.space(REGION).default.key] + [c.key for _, _, c in listed]
    assert [key for key, _ in seen[:5]] == firsts  # measured right after the default
    assert all(ahead > 0 for _, ahead in seen[:5]), seen[:5]  # compiled while it started up
    built = (tmp_path / "builds").read_text().split()
    assert built[:5] == firsts and len(set(built)) == len(built)  # each compiled once
    # a sampled region (a budget below its space) gets no such hint
    assert _api._listed_first(REGION, [lane], 17, 5) == []


@pytest.mark.parametrize("trials", [100, 12])  # a space enumerated, a space sampled
@pytest.mark.parametrize("cols", [512, 16])  # outputs of 256K elements and of 8K
def test_each_next_candidate_is_built_while_the_one_before_is_compared(env, monkeypatch,
                                                                        trials, cols):
    from arbiter import RowwiseRegion
    from arbiter._worker import Worker

    big = RowwiseRegion(512, cols, name="big", epilogue=("gelu",))
    seen = []
    check = Worker.check

    def watched(self, lane, region, config, *a, **kw):
        out = check(self, lane, region, config, *a, **kw)
        seen.append((lane, config, out.built_ahead_s, out.measurement.status))
        return out

    monkeypatch.setattr(Worker, "check", watched)
    [row] = arbiter.tune(big, db=env, trials=trials, lanes=["fake_tiny"], seed=3)
    assert row["config"] == {"block": 4, "unroll": 2, "fast": False}
    ahead = [s > 0 for _, _, s, _ in seen]
    # the configs the rule allows, each once (the emitter refuses one of them: it does not
    # count against the trials)
    valid = [status for _, _, _, status in seen if status is not arbiter.Status.INVALID]
    assert len(seen) == 18 if trials > 18 else len(valid) == trials and len(seen) <= trials + 1
    # the lane's default, first, is built while the sweep starts up. When enumerating, the
    # configs measured after it were named with it (built then too, if the start-up lasted:
    # see the test above), and each one names the next; when sampling, the default names the
    # sampler's first proposal (a random draw still, which its result cannot change), and a
    # few later ones are dropped (a new best: a new ask)
    assert ahead[0] and (ahead[1] or trials > 18)
    assert all(ahead[2:]) if trials > 18 else sum(ahead) >= len(seen) // 2
    assert len({(lane, c.key) for lane, c, _, _ in seen}) == len(seen)


def test_a_later_sweeps_database_study_opens_in_its_first_window(env, tmp_path, monkeypatch):
    # Optuna's storage opened once in this process: a new file's study is opened while the
    # region's first candidate is checked, before anything is recorded
    from arbiter import _studies

    arbiter.tune(REGION, db=env, trials=4, lanes=["fake_tiny"], seed=1)
    measured_at_open = []
    real = _studies.open_study

    def watched(url, name):
        measured_at_open.append(_rows(url, "select count(*) from candidates")[0][0])
        return real(url, name)

    monkeypatch.setattr(_studies, "open_study", watched)
    other = f"sqlite:///{tmp_path / 'other.db'}"
    arbiter.tune(REGION, db=other, trials=12, lanes=["fake_tiny"], seed=2)
    assert measured_at_open == [0]
    # each recorded candidate (refused configs among them) written once all the same
    ids = sorted(t.user_attrs["arbiter"]["candidate"] for t in _db_study(other).trials)
    assert ids == _candidates(other) and len(ids) >= 12
