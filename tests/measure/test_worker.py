"""The worker process: a candidate's crash, hang or error is its result, never the caller's;
what a kernel started goes with it; the finalists' rounds line up."""

from __future__ import annotations

import pytest

from arbiter import Config, FusedRegion, RowwiseRegion, Status
from arbiter.check import fresh_seeds
from arbiter.lane import get_lane
from arbiter.measure import ROUND_CALLS, Timing, Worker, build_candidate
from tests import fake_lanes
from tests.procs import live, proc, soon

REGION = FusedRegion(16, 32, 8, name="w", epilogue=("bias", "gelu"))
QUICK = Timing(warmup=1, rounds=2, wait=0.0)


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes())
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))


def _built(lane: str, config: Config | None = None, region=REGION):
    ln = get_lane(lane)
    built = build_candidate(ln, region, config or ln.space(region).default)
    assert not hasattr(built, "status"), built
    return built


def _check(w: Worker, lane: str, config: Config | None = None, region=REGION, **kw):
    return w.check(lane, region, _built(lane, config, region), 1e-3, seeds=fresh_seeds(),
                   timing=kw.pop("timing", QUICK), **kw)


def test_a_passing_candidate_is_timed_in_rounds_and_records_the_load():
    with Worker(timeout=60) as w:
        m = _check(w, "numpy")
    assert m.status is Status.OK and len(m.samples) >= QUICK.rounds * ROUND_CALLS
    assert m.latency is not None and m.estimate.low <= m.latency <= m.estimate.high
    assert m.timing_method == "monotonic_ns" and m.rel_error < 1e-5
    assert m.load is None or 0 <= m.load <= 1


@pytest.mark.parametrize("lane, status, words", [
    ("fake_segfault", Status.CRASHED, "SIGSEGV"), ("fake_exit", Status.CRASHED, "code 3"),
    ("fake_hang", Status.TIMEOUT, "no result after 2"),
    ("fake_garbage", Status.WRONG_RESULT, "rel_error"),
    ("fake_untouched", Status.UNTOUCHED, "unwritten"), ("fake_nan", Status.NAN, "NaN")])
def test_a_failing_candidate_is_a_status_and_the_next_request_gets_a_fresh_worker(
        fakes, lane, status, words):
    with Worker(timeout=2) as w:
        m = _check(w, lane)
        assert m.status is status and words in m.log, m.log
        assert m.samples == ()  # a wrong or dead kernel never gets a latency
        again = _check(w, "numpy")
        assert again.status is Status.OK
        assert w.starts == (2 if status in (Status.CRASHED, Status.TIMEOUT) else 1)


@pytest.mark.parametrize("lane, status", [("fake_spawn_hang", Status.TIMEOUT),
                                          ("fake_spawn_crash", Status.CRASHED)])
def test_what_a_failed_kernel_started_goes_with_its_worker(fakes, tmp_path, monkeypatch, lane,
                                                           status):
    log = tmp_path / "spawned"
    monkeypatch.setenv("FAKE_SPAWN_LOG", str(log))
    with Worker(timeout=2) as w:
        assert _check(w, lane).status is status
    spawned = [int(x) for x in log.read_text().split()]
    assert spawned and soon(lambda: all(
        (p := proc(pid)) is None or p.state == "Z" or p.name != "sleep" for pid in spawned))


def test_a_request_interrupted_while_waiting_is_not_answered_by_its_late_reply(fakes,
                                                                              monkeypatch):
    from arbiter.measure import _worker

    real = _worker.select.select

    def interrupted(*a, **kw):
        monkeypatch.setattr(_worker.select, "select", real)
        raise KeyboardInterrupt

    slow = Config.of(block=1, unroll=1, fast=False)  # 2.25 ms by the fake clock
    fast = Config.of(block=4, unroll=2, fast=False)  # 1 ms
    with Worker(timeout=60) as w:
        monkeypatch.setattr(_worker.select, "select", interrupted)
        with pytest.raises(KeyboardInterrupt):
            _check(w, "fake_tiny", slow)
        m = _check(w, "fake_tiny", fast)
        assert w.starts == 2
    assert m.status is Status.OK and m.latency == pytest.approx(1e-3, rel=0.05)


def test_an_error_a_lane_raises_in_the_worker_is_a_failed_launch_not_a_crash():
    with Worker(timeout=60) as w:
        m = w.check("numpy", "not a region", _built("numpy"), 1e-3, seeds=[1], timing=QUICK)
        assert m.status is Status.LAUNCH_FAILED and "Traceback" in m.log and w.starts == 1


def test_a_lane_whose_clock_breaks_the_rules_is_a_failed_launch(fakes):
    with Worker(timeout=60) as w:
        for clock in ("nan", "negative", "empty"):
            m = _check(w, "fake_bad_clock", Config.of(clock=clock))
            assert m.status is Status.LAUNCH_FAILED and "not a latency" in m.log or \
                "no samples" in m.log, m.log
        assert _check(w, "fake_bad_clock", Config.of(clock="array")).status is Status.OK


def test_closing_ends_the_worker_and_leaves_no_process(fakes):
    w = Worker(timeout=60)
    _check(w, "numpy")
    assert w.proc is not None
    pid = w.proc.pid
    w.close()
    assert w.proc is None and soon(lambda: (p := proc(pid)) is None or p.state == "Z")
    assert not [p for p in live() if p.ppid == pid]


def test_finalists_are_timed_in_rounds_that_line_up(fakes):
    tiny = get_lane("fake_tiny")
    configs = [Config.of(block=4, unroll=2, fast=False), Config.of(block=2, unroll=2, fast=False)]
    entries = [("fake_tiny", _built("fake_tiny", c)) for c in configs]
    entries.append(("fake_garbage", _built("fake_garbage")))
    timing = Timing(wait=0.0, min_rounds=10, max_rounds=40)
    with Worker(timeout=60) as w:
        ms = w.finals(REGION, entries, 1e-3, seeds=fresh_seeds(), timing=timing)
    a, b, garbage = ms
    assert garbage.status is Status.WRONG_RESULT and garbage.samples == ()
    assert a.status is b.status is Status.OK and len(a.samples) == len(b.samples)
    rounds = len(a.samples) // ROUND_CALLS
    assert rounds in (10, 20, 40) and len(a.samples) % ROUND_CALLS == 0
    assert a.latency == pytest.approx(tiny.latency(configs[0]), rel=0.02)
    assert b.latency == pytest.approx(tiny.latency(configs[1]), rel=0.02)


def test_a_lone_finalist_takes_the_sweeps_rounds_not_the_finals(fakes):
    """With nothing to be told apart from, one finalist (the other failed its check) is timed
    for the sweep's rounds, not the first look of the interleaved ones."""
    entries = [("fake_tiny", _built("fake_tiny", Config.of(block=4, unroll=2, fast=False))),
               ("fake_garbage", _built("fake_garbage"))]
    timing = Timing(wait=0.0, rounds=3, min_rounds=10, max_rounds=40)
    with Worker(timeout=60) as w:
        lone, garbage = w.finals(REGION, entries, 1e-3, seeds=fresh_seeds(), timing=timing)
    assert garbage.status is Status.WRONG_RESULT
    assert lone.status is Status.OK and len(lone.samples) == 3 * ROUND_CALLS


def test_a_finalist_whose_clock_fails_in_a_later_round_is_left_out(fakes):
    entries = [("fake_bad_clock", _built("fake_bad_clock", Config.of(clock=c)))
               for c in ("ok", "nan_later")]
    with Worker(timeout=60) as w:
        ok, later = w.finals(REGION, entries, 1e-3, seeds=fresh_seeds(),
                             timing=Timing(wait=0.0))
    assert ok.status is Status.OK and later.status is Status.LAUNCH_FAILED
    assert "finalist re-timing failed" in later.log


def test_large_outputs_are_checked_and_timed_on_fresh_inputs():
    region = RowwiseRegion(512, 2048, epilogue=("bias", "gelu"), residual=True)
    with Worker(timeout=120) as w:
        m = _check(w, "numpy", region=region)
    assert m.status is Status.OK and m.rel_error < 1e-6


def test_waiting_for_a_busy_machine_does_not_count_against_the_candidates_timeout():
    import os
    import subprocess
    import sys

    if not os.path.exists("/proc/stat"):
        pytest.skip("the load is read from Linux's /proc")
    spin = "import sys; sys.stdout.write('x'); sys.stdout.flush()\nwhile True: pass"
    busy = [subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
            for _ in os.sched_getaffinity(0)]
    for p in busy:  # each is spinning before the timing starts (a slow start-up under load)
        assert p.stdout is not None and p.stdout.read(1) == b"x"
    try:
        with Worker(timeout=1.5) as w:
            _check(w, "numpy")  # the worker's start-up, outside the timed request
            m = _check(w, "numpy", timing=Timing(warmup=1, rounds=2, wait=1.0))
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert m.status is Status.OK, m.log
    assert m.waited >= 1.0 and m.load is not None and m.load > 0.2
