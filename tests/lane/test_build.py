"""Compiler runs and the build cache: a hung compiler is killed whole; a build is cached by
its content, in the cache the settings name."""

from __future__ import annotations

import subprocess
import time

from arbiter.lane import run_tool
from tests.procs import live, soon


def test_a_tool_past_its_timeout_is_killed_with_its_children():
    # the child holds the output pipe open: unless the whole group dies, this waits 30 s
    t0 = time.perf_counter()
    rc, log = run_tool(["sh", "-c", "sleep 30 & wait"], timeout=0.5)
    assert rc == 124 and "timed out" in log and time.perf_counter() - t0 < 10


def test_a_tool_reports_its_exit_code_and_output():
    assert run_tool(["sh", "-c", "echo out; echo err >&2; exit 3"]) == (3, "out\nerr\n")
    assert run_tool(["/nonexistent/cc"])[0] == 127


def test_an_interrupted_tool_is_killed_with_its_children(monkeypatch):
    import signal

    import pytest

    started = []
    real_popen = subprocess.Popen

    def popen(*a, **kw):
        p = real_popen(*a, **kw)
        started.append(p.pid)
        return p

    def interrupt(*_):
        raise KeyboardInterrupt

    monkeypatch.setattr(subprocess, "Popen", popen)
    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            run_tool(["sh", "-c", "sleep 30 & wait"])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    [pid] = started
    # the whole group is gone: nothing in it (the shell, its sleep) is left running
    assert soon(lambda: not [p for p in live() if p.group == pid])


def test_a_candidate_is_built_once_per_cache_and_a_refused_one_never(tmp_path, monkeypatch):
    from pathlib import Path

    from arbiter import Config, RowwiseRegion
    from arbiter.lane import get_lane
    from arbiter.measure import build_candidate

    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "a"))
    lane = get_lane("x86_c")
    if not lane.available():
        import pytest

        pytest.skip("no C compiler")
    region = RowwiseRegion(8, 64, name="memo", epilogue=("gelu",))
    config = lane.space(region).default
    first = build_candidate(lane, region, config)
    again = build_candidate(lane, region, config)
    assert not first.cached and again.cached and again.path == first.path
    assert again.compile_seconds == 0.0
    Path(first.path).unlink()  # the cache was cleared: built anew
    assert not build_candidate(lane, region, config).cached
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "b"))  # another cache
    assert str(tmp_path / "b") in build_candidate(lane, region, config).path
    refused = build_candidate(lane, region, Config.of(**{**dict(config.items), "threads": 0}))
    assert refused.status.value == "invalid" and "threads=0" in refused.log
