"""The trial worker's protocol: the parent's own work overlaps build and check, never timing."""

from __future__ import annotations

import os
import threading
import time

import pytest

from arbiter import Config, FusedRegion, RowwiseRegion, Status
from arbiter._parts import usable_cores
from arbiter._worker import Worker
from tests import fake_lanes
from tests.procs import cpu_ns, live, proc, rss_mb, soon, threads

REGION = FusedRegion(16, 32, 8, name="w", epilogue=("bias", "gelu"))
# large enough that the worker compares its outputs while the next candidate builds
BIG = RowwiseRegion(512, 512, name="big", epilogue=("bias", "gelu"))


def test_timing_waits_for_the_parents_work():
    with Worker(timeout=60) as w:
        w.check("numpy", REGION, Config(), 1e-3, warmup=1, repeats=3)  # child imports done
        done = []

        def slow_bookkeeping() -> None:
            time.sleep(0.5)
            done.append(time.perf_counter())

        out = w.check("numpy", REGION, Config(), 1e-3, warmup=1, repeats=3,
                      meanwhile=slow_bookkeeping)
    assert out.measurement.status is Status.OK and done
    # build + check of this tiny region take far less than 0.5 s: the child sat at the gate
    assert out.gate_s > 0.3
    assert out.timing_s < out.gate_s


def test_parent_chores_are_done_a_step_per_window_never_beside_a_timing():
    # the later regions' plans, made one per window while the first region is searched
    with Worker(timeout=60) as w:
        w.check("numpy", REGION, Config(), 1e-3, warmup=1, repeats=3)  # child imports done
        steps: list[int] = []

        def step() -> bool:
            time.sleep(0.3)
            steps.append(len(steps))
            return len(steps) < 2

        w.between_trials(step)
        outs = [w.check("numpy", REGION, Config(), 1e-3, warmup=1, repeats=3) for _ in range(3)]
    assert all(o.measurement.status is Status.OK for o in outs)
    assert steps == [0, 1]  # one step in each of two windows, then dropped
    assert outs[0].gate_s > 0.2 and outs[1].gate_s > 0.2 and outs[2].gate_s < 0.2


@pytest.mark.parametrize("error", [RuntimeError, BrokenPipeError])
def test_failing_parent_work_restarts_the_worker_cleanly(error):
    # a BrokenPipeError of the parent's own (a progress line to a closed stderr) must not pass
    # for the child dying: that would record the candidate in flight as crashed
    with Worker(timeout=60) as w:
        def broken() -> None:
            raise error("database went away")

        with pytest.raises(error, match="went away"):
            w.check("numpy", REGION, Config(), 1e-3, warmup=0, repeats=1, meanwhile=broken)
        again = w.check("numpy", REGION, Config(), 1e-3, warmup=0, repeats=2)
        assert again.measurement.status is Status.OK and len(again.measurement.samples) == 2
        assert w.starts == 2


def test_requests_that_never_time_still_take_their_go():
    # an invalid candidate returns before timing; the next request must not be read as "go"
    with Worker(timeout=60) as w:
        bad = w.check("numpy", REGION, Config.of(x=1), 1e-3, warmup=0, repeats=1)
        assert bad.measurement.status is Status.INVALID
        good = w.check("numpy", REGION, Config(), 1e-3, warmup=0, repeats=2)
        assert good.measurement.status is Status.OK and w.starts == 1


def test_a_request_interrupted_while_waiting_is_not_answered_by_its_late_reply(monkeypatch):
    # Ctrl-C while the parent waits: the child still replies, later; the next request must get
    # its own answer, never that one
    from arbiter import _worker
    from tests import fake_lanes

    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes("fake_tiny"))
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    slow, fast = Config.of(block=1, unroll=1, fast=False), Config.of(block=4, unroll=2, fast=False)
    with Worker(timeout=60) as w:
        real = _worker.select.select

        def interrupted(*a, **kw):
            monkeypatch.setattr(_worker.select, "select", real)
            raise KeyboardInterrupt

        monkeypatch.setattr(_worker.select, "select", interrupted)
        with pytest.raises(KeyboardInterrupt):
            w.check("fake_tiny", REGION, slow, 1e-3, warmup=0, repeats=5)
        assert w.busy and not w.reusable()
        out = w.check("fake_tiny", REGION, fast, 1e-3, warmup=0, repeats=5)
    m = out.measurement
    assert m.status is Status.OK and m.median == pytest.approx(1e-3, rel=0.05)  # fast's latency
    assert w.starts == 2


def _fakes(monkeypatch, *names: str) -> None:
    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes(*names))
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())


def _children(pid: int) -> dict[int, str]:
    """The live processes whose parent is `pid`: pid -> name."""
    return {p.pid: p.name for p in live() if p.ppid == pid}


def _gone(pid: int) -> bool:
    return soon(lambda: (p := proc(pid)) is None or p.state == "Z")


def test_the_candidate_expected_next_is_built_while_this_one_is_compared(tmp_path, monkeypatch):
    from arbiter._registry import get_lane

    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path))
    first, second = list(get_lane("x86_c").space(BIG).configs())[:2]
    with Worker(timeout=120) as w:
        a = w.check("x86_c", BIG, first, 1e-3, warmup=1, repeats=3,
                    meanwhile=lambda: ("x86_c", second))
        b = w.check("x86_c", BIG, second, 1e-3, warmup=1, repeats=3)
        # builds that are cache hits leave nothing to overlap: no build ahead then
        w.check("x86_c", BIG, first, 1e-3, warmup=1, repeats=3, meanwhile=lambda: ("x86_c", second))
        again = w.check("x86_c", BIG, second, 1e-3, warmup=1, repeats=3)
    assert again.built_ahead_s == 0 and again.measurement.status is Status.OK
    assert a.measurement.status is Status.OK and b.measurement.status is Status.OK
    assert len(b.measurement.samples) == 3 and b.measurement.rel_error < 1e-5
    assert b.built_ahead_s > 0  # its compile began before its request came
    # its compile time is recorded, although its request found it built or under way
    assert b.measurement.compile_seconds > 0


def test_a_hint_naming_a_regions_seeds_has_the_child_make_its_cases_before_any_request():
    # 4M elements: each seed's inputs, their timing copies, the float64 reference and the
    # output buffer take ~110 MB
    region = RowwiseRegion(2048, 2048, name="hinted", epilogue=("gelu",), residual=True)
    with Worker(timeout=60) as w:
        w.build_early([])  # no candidates, no cases: no hint
        assert w.proc is None
        w.build_early([], cases=(region, [11, 12]))
        assert w.proc is not None
        pid = w.proc.pid
        assert soon(lambda: rss_mb(pid) > 200, within=30)
        assert w.requests == 0
        assert w.seeds_for(region) == [11, 12]
        again = w.seeds_for(region)  # once: a later sweep draws its own
        assert len(again) == 2 and again != [11, 12]
        out = w.check("numpy", region, Config(), 1e-3, seeds=[11, 12], warmup=1, repeats=2)
    assert out.measurement.status is Status.OK and "seed 11:" in out.measurement.log


SLOW_BUILD = ("fake_slow_build", Config.of(block=4, unroll=2, fast=False))
ONE, OTHER = Config.of(block=4, unroll=2, fast=False), Config.of(block=2, unroll=2, fast=False)


def _sleeping(w: Worker) -> int:
    """The pid of the worker's compiler (a fake lane's `sleep`), once it runs."""
    assert w.proc is not None
    end = time.monotonic() + 10
    while time.monotonic() < end:
        compiler = next((p for p, name in _children(w.proc.pid).items() if name == "sleep"), None)
        if compiler is not None:
            return compiler
        time.sleep(0.02)
    raise AssertionError("the build in the background never started")


def _ahead_sleeping(w: Worker) -> int:
    """Check ONE, naming the slow build as next; the pid of that build's 30 s compiler."""
    a = w.check("fake_tiny", BIG, ONE, 1e-3, warmup=0, repeats=3, meanwhile=lambda: SLOW_BUILD)
    assert a.measurement.status is Status.OK
    return _sleeping(w)


def test_the_build_ahead_runs_once_while_the_worker_replies_and_waits(tmp_path, monkeypatch):
    _fakes(monkeypatch, "fake_tiny", "fake_slow_build")
    monkeypatch.setenv("FAKE_BUILD_LOG", str(tmp_path / "builds"))
    with Worker(timeout=60) as w:
        compiler = _ahead_sleeping(w)
        time.sleep(0.5)
        assert proc(compiler) is not None  # the same compile, still running
        assert (tmp_path / "builds").read_text().splitlines() == [SLOW_BUILD[1].key]


def test_a_check_sent_ahead_is_taken_up_as_the_worker_replies(monkeypatch):
    _fakes(monkeypatch, "fake_tiny")
    with Worker(timeout=60) as w:
        w.check("fake_tiny", REGION, ONE, 1e-3, warmup=0, repeats=2)  # the child's imports
        a = w.check("fake_tiny", REGION, ONE, 1e-3, warmup=0, repeats=2,
                    meanwhile=lambda: ("fake_tiny", OTHER), send_next=True)
        assert a.measurement.status is Status.OK and w.ahead is not None
        sent = w.requests
        time.sleep(0.3)  # the parent's own work; the child checks OTHER meanwhile
        b = w.check("fake_tiny", REGION, OTHER, 1e-3, warmup=0, repeats=2)
        assert w.requests == sent and w.ahead is None  # only its go was sent
    m = b.measurement
    assert m.status is Status.OK and m.median == pytest.approx(2e-3, rel=0.1)  # OTHER's latency
    assert b.wall_s >= 0.3  # counted from when the child took it up


def test_a_check_sent_ahead_compiles_before_its_go_and_is_called_off_halfway(monkeypatch):
    _fakes(monkeypatch, "fake_tiny", "fake_slow_build")
    with Worker(timeout=60) as w:
        a = w.check("fake_tiny", REGION, ONE, 1e-3, warmup=0, repeats=2,
                    meanwhile=lambda: SLOW_BUILD, send_next=True)
        assert a.measurement.status is Status.OK and w.ahead is not None
        compiler = _sleeping(w)  # its 30 s compile, in the background before its go
        t0 = time.perf_counter()
        b = w.check("fake_tiny", REGION, OTHER, 1e-3, warmup=0, repeats=2)
        assert time.perf_counter() - t0 < 10 and _gone(compiler) and w.ahead is None
        assert b.measurement.status is Status.OK and w.starts == 1
        w.call_off()  # nothing sent ahead: nothing to do
        c = w.check("fake_tiny", REGION, ONE, 1e-3, warmup=0, repeats=2)
    assert c.measurement.status is Status.OK and w.starts == 1


def test_a_called_off_checks_compile_stops_before_the_next_request(monkeypatch):
    # after a call-off the parent asks the sampler again before it sends anything: the
    # compile of the check called off must not run on beside that, until the next request
    _fakes(monkeypatch, "fake_tiny", "fake_slow_build")
    with Worker(timeout=60) as w:
        w.check("fake_tiny", REGION, ONE, 1e-3, warmup=0, repeats=2,
                meanwhile=lambda: SLOW_BUILD, send_next=True)
        compiler = _sleeping(w)  # its 30 s compile, in the background before its go
        sent = w.requests
        w.call_off(wait=False)
        assert _gone(compiler) and w.requests == sent
        b = w.check("fake_tiny", REGION, OTHER, 1e-3, warmup=0, repeats=2)
    assert b.measurement.status is Status.OK and w.starts == 1


def test_a_check_sent_ahead_that_compiles_counts_its_compile_as_built_ahead(monkeypatch):
    _fakes(monkeypatch, "fake_tiny", "fake_slow_build")
    monkeypatch.setenv("FAKE_BUILD_SECONDS", "1")
    with Worker(timeout=60) as w:
        w.check("fake_tiny", REGION, ONE, 1e-3, warmup=0, repeats=2,
                meanwhile=lambda: SLOW_BUILD, send_next=True)
        time.sleep(0.5)  # the parent's own work, beside the compile
        b = w.check(SLOW_BUILD[0], REGION, SLOW_BUILD[1], 1e-3, warmup=0, repeats=2)
    assert b.measurement.status is Status.OK and w.requests == 2
    assert b.built_ahead_s >= 0.25 and b.build_s + b.built_ahead_s >= 0.9


def test_a_check_sent_ahead_goes_with_a_crash_of_the_one_before(monkeypatch):
    _fakes(monkeypatch, "fake_tiny", "fake_segfault")
    with Worker(timeout=60) as w:
        a = w.check("fake_segfault", REGION, Config(), 1e-3, warmup=0, repeats=2,
                    meanwhile=lambda: ("fake_tiny", ONE), send_next=True)
        assert a.measurement.status is Status.CRASHED and w.ahead is None
        b = w.check("fake_tiny", REGION, ONE, 1e-3, warmup=0, repeats=2)
    assert b.measurement.status is Status.OK and w.starts == 2


def test_a_check_sent_ahead_that_crashes_reports_its_own_crash(monkeypatch):
    _fakes(monkeypatch, "fake_tiny", "fake_segfault")
    with Worker(timeout=60) as w:
        a = w.check("fake_tiny", REGION, ONE, 1e-3, warmup=0, repeats=2,
                    meanwhile=lambda: ("fake_segfault", Config()), send_next=True)
        assert a.measurement.status is Status.OK  # replied before the next one crashed
        b = w.check("fake_segfault", REGION, Config(), 1e-3, warmup=0, repeats=2)
        assert b.measurement.status is Status.CRASHED and "SIGSEGV" in b.measurement.log
        # called off instead: stopped at a check-in, or crashed first and replaced
        w.check("fake_tiny", REGION, ONE, 1e-3, warmup=0, repeats=2,
                meanwhile=lambda: ("fake_segfault", Config()), send_next=True)
        c = w.check("fake_tiny", REGION, ONE, 1e-3, warmup=0, repeats=2)
    assert c.measurement.status is Status.OK and w.starts in (2, 3)


def test_a_build_ahead_that_is_not_wanted_is_stopped(monkeypatch):
    _fakes(monkeypatch, "fake_tiny", "fake_slow_build")
    with Worker(timeout=60) as w:
        compiler = _ahead_sleeping(w)
        t0 = time.perf_counter()
        b = w.check("fake_tiny", BIG, OTHER, 1e-3, warmup=0, repeats=3)
        took = time.perf_counter() - t0
        assert b.measurement.status is Status.OK
        assert took < 10 and _gone(compiler)  # its 30 s compiler was killed, not waited for


def test_interleaved_finalists_report_their_time_inside_the_timing_calls(tmp_path,
                                                                         monkeypatch):
    from arbiter._registry import get_lane

    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path))
    a, b = list(get_lane("x86_c").space(REGION).configs())[:2]
    with Worker(timeout=120) as w:
        got = w.interleave(REGION, [("x86_c", a), ("x86_c", b)], rounds=3, repeats=4,
                           warmup=2)
    assert [len(s) for s in got.samples] == [12, 12]
    timed = sum(sum(s) for s in got.samples if isinstance(s, list))
    # warm-ups and the loop around the samples are in the child's time too, never less
    assert 0 < timed <= got.timing_s < 60


@pytest.mark.parametrize("how", ["close", "kill", "interleave"])
def test_no_build_ahead_outlives_the_worker_or_runs_beside_other_work(monkeypatch, how):
    _fakes(monkeypatch, "fake_tiny", "fake_slow_build")
    with Worker(timeout=60) as w:
        compiler = _ahead_sleeping(w)
        t0 = time.perf_counter()
        if how == "close":
            w.close()
        elif how == "kill":  # what a timeout or an interrupted request does
            w._kill()
        else:
            got = w.interleave(BIG, [("fake_tiny", ONE), ("fake_tiny", OTHER)], rounds=1,
                               repeats=2)
            assert all(isinstance(x, list) for x in got.samples)
        assert _gone(compiler) and time.perf_counter() - t0 < 10


def test_the_first_candidates_are_built_while_the_parent_starts_up(tmp_path, monkeypatch):
    from arbiter._registry import get_lane

    _fakes(monkeypatch, "fake_device")
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path))
    default, other = list(get_lane("x86_c").space(REGION).configs())[:2]
    with Worker(timeout=120) as w:
        t0 = time.perf_counter()
        w.build_early([(REGION, "numpy", Config()), (REGION, "x86_c", default),
                       (REGION, "fake_device", ONE)])
        time.sleep(0.05)  # the parent's start-up
        a = w.check("numpy", REGION, Config(), 1e-3, warmup=0, repeats=3)
        span = time.perf_counter() - t0
        b = w.check("x86_c", REGION, default, 1e-3, warmup=1, repeats=3)
        c = w.check("x86_c", REGION, other, 1e-3, warmup=1, repeats=3)
        d = w.check("fake_device", REGION, ONE, 1e-3, warmup=0, repeats=3)
    assert all(x.measurement.status is Status.OK for x in (a, b, c, d))
    # the first request waited for the compile in the background to end (nothing is checked
    # or timed beside a compiler); the one it built for found it done; its compile is counted
    # once: the part before that wait as built ahead, the wait as the first request's build
    assert b.built_ahead_s > 0 and b.build_s < 0.05 and b.measurement.compile_seconds > 0
    assert 0.9 * b.measurement.compile_seconds < a.build_s + b.built_ahead_s < span
    assert c.built_ahead_s == 0 and c.build_s > 0  # not named early: built in its request
    assert d.built_ahead_s == 0  # a GPU lane's build is never made in the background


def test_a_regions_first_check_makes_its_references_while_its_defaults_compile(monkeypatch):
    # in this process, as the worker does it: the request that is to wait for the defaults
    # compiling in the background makes its inputs and references first
    from arbiter import _check
    from arbiter import _worker_child as _worker

    _fakes(monkeypatch, "fake_tiny", "fake_slow_build")
    _check.forget_cases()
    ahead = _worker._Ahead([(BIG, *SLOW_BUILD)], early=True)
    _worker._AHEAD.append(ahead)
    try:
        first = {"lane": "fake_tiny", "region": BIG, "config": ONE, "seeds": [5, 6]}
        assert _worker._cases_beside_build(first) == [5, 6]
        assert list(_check._CASES) == [(BIG, 5), (BIG, 6)]
        assert not ahead.done.is_set() and not ahead.built  # made while the compiler ran
        fresh = _worker._cases_beside_build({**first, "seeds": None})
        assert len(fresh) == 2 and all((BIG, s) in _check._CASES for s in fresh)
        # a build ahead of the candidate expected next: only its own request waits for it
        _worker._take_ahead()
        _check.forget_cases()
        _worker._AHEAD.append(_worker._Ahead([(BIG, *SLOW_BUILD)]))
        assert _worker._cases_beside_build(first) == [5, 6] and not _check._CASES
    finally:
        _worker._take_ahead()
        _check.forget_cases()
    assert ahead.done.is_set()


@pytest.mark.parametrize("where", ["same region", "other region"])
def test_a_request_before_the_early_builds_began_still_waits_for_its_regions_first_compile(
        tmp_path, monkeypatch, where):
    # in this process: the builds' thread is held until the request has come. A lane with
    # no compiler first (a cache hit), then the region's first compile: that one runs, for
    # a request in its region, while the request makes its references; none after it
    from arbiter import _worker_child as _worker

    _fakes(monkeypatch, "fake_slow_build")
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_BUILD_SECONDS", "1")
    monkeypatch.setenv("FAKE_BUILD_LOG", str(tmp_path / "builds"))
    held = threading.Event()
    run = _worker._Ahead.run
    monkeypatch.setattr(_worker._Ahead, "run", lambda self: held.wait() and run(self))
    ahead = _worker._Ahead([(BIG, "numpy", Config()), (BIG, *SLOW_BUILD),
                            (BIG, "fake_slow_build", OTHER)], early=True)
    try:
        asked = BIG if where == "same region" else REGION
        assert ahead.waits_for("numpy", asked, Config())  # nothing under way: it waits
        held.set()
        ahead.done.wait(30)
        builds = tmp_path / "builds"
        if where == "other region":
            assert not ahead.built and not builds.exists()
        else:
            assert list(ahead.built) == [(BIG, "numpy", Config().key), (BIG, SLOW_BUILD[0],
                                                             SLOW_BUILD[1].key)]
            assert builds.read_text().splitlines() == [SLOW_BUILD[1].key]
    finally:
        held.set()
        ahead.drop()


@pytest.mark.parametrize("how", ["close", "kill"])
def test_an_early_build_never_outlives_the_worker(monkeypatch, how):
    _fakes(monkeypatch, "fake_slow_build")
    with Worker(timeout=60) as w:
        w.build_early([(BIG, *SLOW_BUILD)])
        compiler = _sleeping(w)
        t0 = time.perf_counter()
        if how == "close":  # a worker that was told to build and never asked anything
            w.close()
        else:
            w._kill()
        assert _gone(compiler) and time.perf_counter() - t0 < 10


@pytest.mark.parametrize("where", ["same region", "other region"])
def test_a_request_ends_the_early_builds(tmp_path, monkeypatch, where):
    # the defaults named early compile one after another until a request comes; no other
    # starts then; a request in the region of the compile under way waits for it (none runs
    # beside a check), a request in another region stops it
    _fakes(monkeypatch, "fake_tiny", "fake_slow_build")
    monkeypatch.setenv("FAKE_BUILD_SECONDS", "2")
    monkeypatch.setenv("FAKE_BUILD_LOG", str(tmp_path / "builds"))
    with Worker(timeout=60) as w:
        w.build_early([(BIG, *SLOW_BUILD), (REGION, "fake_slow_build", OTHER)])
        compiler = _sleeping(w)
        out = w.check("fake_tiny", BIG if where == "same region" else REGION, ONE, 1e-3,
                      warmup=0, repeats=3)
        assert out.measurement.status is Status.OK and _gone(compiler)
        time.sleep(0.5)
        assert (tmp_path / "builds").read_text().splitlines() == [SLOW_BUILD[1].key]
        if where == "other region":
            assert out.build_s < 0.5
            return
        assert 0.5 < out.build_s < 5
        # the one it finished is kept for its own request, its compile counted there
        done = w.check("fake_slow_build", BIG, SLOW_BUILD[1], 1e-3, warmup=0, repeats=3)
        assert done.measurement.status is Status.OK and done.build_s < 0.5
        assert 0 < done.built_ahead_s < 2.5
        assert (tmp_path / "builds").read_text().splitlines() == [SLOW_BUILD[1].key]


def test_a_candidate_timed_before_its_check_keeps_no_latency_when_it_fails(monkeypatch):
    _fakes(monkeypatch, "fake_slow_garbage", "fake_tiny")
    with Worker(timeout=60) as w:
        out = w.check("fake_slow_garbage", BIG, Config(), 1e-3, warmup=0, repeats=3,
                      meanwhile=lambda: ("fake_tiny", ONE))
    m = out.measurement
    assert m.status is Status.WRONG_RESULT and m.rel_error > 0.5
    assert m.samples == () and m.median is None and "timing is dropped" in m.log


def test_a_check_of_something_not_a_region_is_an_error_not_a_crash():
    with Worker(timeout=60) as w:
        out = w.check("numpy", "not a region", Config(), 1e-3, warmup=0, repeats=1)
        assert out.measurement.status is Status.LAUNCH_FAILED and w.starts == 1


def test_a_build_ahead_under_other_settings_is_not_used(tmp_path, monkeypatch):
    from arbiter._registry import get_lane

    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "one"))
    first, second = list(get_lane("x86_c").space(BIG).configs())[:2]
    with Worker(timeout=120) as w:
        w.check("x86_c", BIG, first, 1e-3, warmup=1, repeats=3,
                meanwhile=lambda: ("x86_c", second))
        monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "two"))
        out = w.check("x86_c", BIG, second, 1e-3, warmup=1, repeats=3)
    assert out.measurement.status is Status.OK and out.built_ahead_s == 0
    assert list((tmp_path / "two").rglob("*.so"))  # built into this sweep's cache


@pytest.mark.skipif(usable_cores() < 2, reason="one core: an OpenMP kernel runs alone")
@pytest.mark.skipif("clang" in os.environ.get("ARBITER_CC", "gcc"),
                    reason="clang's OpenMP runtime (libomp) has its own wait settings")
def test_a_cpu_kernels_threads_stop_spinning_soon_after_its_runs():
    # libgomp's default keeps a team's threads spinning 10-20 ms after each run: a core each,
    # taken from the worker's comparisons and the parent's own work between runs
    from arbiter._registry import get_lane

    lane = get_lane("x86_c")
    default = lane.space(BIG).default  # every core's thread
    assert dict(default.items)["threads"] == usable_cores()
    with Worker(timeout=120) as w:
        # numpy's check first: the threads it leaves are not the kernel's (the main one, and
        # OpenBLAS's pool, which spins after BLAS calls on a clock of its own: 1-13 ms in
        # this window in 3 to 6 of 8 runs here, on the session-start tree f3612e6 too)
        w.check("numpy", REGION, Config(), 1e-3, warmup=1, repeats=3)
        assert w.proc is not None
        pid = w.proc.pid
        not_the_kernels = threads(pid)
        w.check("x86_c", BIG, default, 1e-3, warmup=1, repeats=3)  # compiled, imports done
        out = w.check("x86_c", BIG, default, 1e-3, warmup=1, repeats=20)
        assert threads(pid) - not_the_kernels  # the team's other threads
        start = cpu_ns(pid, leave_out=not_the_kernels)
        time.sleep(0.1)
        spent_ms = (cpu_ns(pid, leave_out=not_the_kernels) - start) / 1e6
    assert out.measurement.status is Status.OK
    assert spent_ms < 2, f"the kernel's threads ran {spent_ms:.1f} ms while it waited"


def test_the_users_own_openmp_wait_settings_reach_the_worker(monkeypatch):
    from pathlib import Path

    def child_env() -> dict[str, str]:
        with Worker(timeout=60) as w:
            w.check("numpy", REGION, Config(), 1e-3)
            assert w.proc is not None
            raw = Path(f"/proc/{w.proc.pid}/environ").read_bytes()
        return dict(kv.split("=", 1) for kv in raw.decode().split("\0") if "=" in kv)

    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert child_env()["GOMP_SPINCOUNT"] == "10000"
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    env = child_env()
    assert env["OMP_WAIT_POLICY"] == "active" and "GOMP_SPINCOUNT" not in env
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "123")
    assert child_env()["GOMP_SPINCOUNT"] == "123"


def test_closing_waits_for_the_child_by_its_pipe_and_kills_one_that_stays():
    import subprocess
    import sys

    from arbiter._worker import _ended

    def child(code: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)

    # a reply left unread, then the end: seen as it comes, not at a poll's next wake-up
    ends = child("import sys, time; sys.stdout.write('x' * 100000); sys.stdout.flush(); "
                 "sys.stdin.read(); time.sleep(0.2)")
    ends.stdin.close()
    t0 = time.monotonic()
    _ended(ends, 10.0)
    assert ends.returncode == 0 and time.monotonic() - t0 < 5
    stays = child("import time; time.sleep(60)")
    stays.stdin.close()
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        _ended(stays, 0.5)
    assert 0.5 <= time.monotonic() - t0 < 5
    stays.kill()
    stays.wait()
    stays.stdout.close()
    ends.stdout.close()
