"""Compiler runs: a build nobody wants any more is stopped, a hung one is killed whole."""

from __future__ import annotations

import subprocess
import threading
import time

from arbiter._build import forget_stopped, run_tool, stop_tools
from tests.procs import live, soon


def test_a_stopped_build_kills_its_tool_and_starts_no_other():
    done: list[tuple[tuple[int, str], tuple[int, str]]] = []
    t = threading.Thread(target=lambda: done.append((
        run_tool(["sleep", "30"], stoppable=True), run_tool(["sleep", "30"], stoppable=True))))
    t0 = time.perf_counter()
    t.start()
    time.sleep(0.3)
    assert t.ident is not None
    stop_tools(t.ident)
    t.join(10)
    forget_stopped(t.ident)
    assert not t.is_alive() and time.perf_counter() - t0 < 10
    (rc1, _), (rc2, log2) = done[0]
    assert rc1 != 0 and rc2 == 125 and "stopped" in log2


def test_a_tool_past_its_timeout_is_killed_with_its_children():
    # the child holds the output pipe open: unless the whole group dies, this waits 30 s
    t0 = time.perf_counter()
    rc, log = run_tool(["sh", "-c", "sleep 30 & wait"], timeout=0.5)
    assert rc == 124 and "timed out" in log and time.perf_counter() - t0 < 10


def test_a_tool_reports_its_exit_code_and_output():
    assert run_tool(["sh", "-c", "echo out; echo err >&2; exit 3"]) == (3, "out\nerr\n")
    assert run_tool(["/nonexistent/cc"])[0] == 127


def test_a_probe_is_never_stopped():
    # a probe's answer is cached for the process: a killed one would be cached as the answer
    me = threading.get_ident()
    stop_tools(me)
    try:
        assert run_tool(["sh", "-c", "echo probed"]) == (0, "probed\n")
        assert run_tool(["true"], stoppable=True)[0] == 125
    finally:
        forget_stopped(me)
    assert run_tool(["true"], stoppable=True)[0] == 0


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


def test_a_candidate_built_before_in_this_process_is_not_emitted_again(tmp_path, monkeypatch):
    # a build cache hit needs only its file: the source is not generated and hashed again,
    # unless the file is gone or the settings (another cache) changed
    from pathlib import Path

    from arbiter import Config, RowwiseRegion
    from arbiter._lane import build_candidate
    from arbiter._registry import get_lane

    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "a"))
    lane = get_lane("x86_c")
    region = RowwiseRegion(8, 64, name="memo", epilogue=("gelu",))
    config = lane.space(region).default
    emitted = []
    real = type(lane).emit

    def counted(self, r, c):
        emitted.append(c.key)
        return real(self, r, c)

    monkeypatch.setattr(type(lane), "emit", counted)
    first = build_candidate(lane, region, config)
    again = build_candidate(lane, region, config)
    assert len(emitted) == 1 and again.cached and again.path == first.path
    assert again.compile_seconds == 0.0 and not again.log
    Path(first.path).unlink()  # the cache was cleared: built anew
    rebuilt = build_candidate(lane, region, config)
    assert len(emitted) == 2 and not rebuilt.cached and Path(rebuilt.path).exists()
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "b"))  # another cache
    other = build_candidate(lane, region, config)
    assert len(emitted) == 3 and str(tmp_path / "b") in other.path
    refused = build_candidate(lane, region, Config.of(**{**dict(config.items), "threads": 0}))
    assert not hasattr(refused, "path")  # a refused config is never remembered as built
