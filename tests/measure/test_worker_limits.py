"""The worker's limits (issue 41, item 12): a candidate holding more memory than the worker's
limit is `out_of_memory` (an address space reserved, as GPU runtimes reserve theirs, is not
held memory), and a candidate gets `timeout` seconds of its own, the first of a sweep too:
never the worker's start-up, nor twice as much."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from arbiter import ArbiterError, FusedRegion, Status
from arbiter.check import fresh_seeds
from arbiter.lane import get_lane
from arbiter.measure import Timing, Worker, build_candidate, memory_limit
from tests import fake_lanes

ROOT = Path(__file__).resolve().parents[2]
REGION = FusedRegion(16, 32, 8, name="w", epilogue=("bias", "gelu"))


@pytest.fixture
def fakes(monkeypatch, tmp_path):
    monkeypatch.setenv("ARBITER_EXTRA_LANES", fake_lanes.extra_lanes())
    monkeypatch.setenv("PYTHONPATH", fake_lanes.pythonpath())
    monkeypatch.setenv("ARBITER_CACHE_DIR", str(tmp_path / "cache"))


QUICK = Timing(warmup=1, rounds=2, wait=0.0)


def _check(w: Worker, lane: str, timing: Timing | None = QUICK):
    ln = get_lane(lane)
    built = build_candidate(ln, REGION, ln.space(REGION).default)
    return w.check(lane, REGION, built, 1e-3, seeds=fresh_seeds(), timing=timing)


def test_a_candidate_holding_more_than_the_limit_is_out_of_memory(fakes, monkeypatch):
    if not os.path.exists("/proc/self/status"):
        pytest.skip("the worker's memory is read from Linux's /proc")
    monkeypatch.setenv("ARBITER_WORKER_MEMORY", "384M")
    monkeypatch.setenv("FAKE_HOG_BYTES", str(1 << 30))
    with Worker(timeout=60) as w:
        m = _check(w, "fake_hog")
        assert m.status is Status.OUT_OF_MEMORY and "over its limit of 0.38 GiB" in m.log, m.log
        assert m.samples == ()
        assert _check(w, "numpy").status is Status.OK and w.starts == 2


def test_address_space_reserved_but_not_used_is_not_held(fakes, monkeypatch):
    monkeypatch.setenv("ARBITER_WORKER_MEMORY", "384M")
    with Worker(timeout=60) as w:
        m = _check(w, "fake_reserve")
    assert m.status is Status.OK, m.log


def test_the_default_limit_grows_with_the_region_and_a_malformed_one_is_one_line(
        monkeypatch, tmp_path):
    big = FusedRegion(4096, 4096, 4096, name="big")  # A, B and the output: 64 MiB each
    assert memory_limit(big, "") == (4 << 30) + 12 * 3 * (64 << 20)
    assert memory_limit(REGION, "") > 4 << 30 and memory_limit(REGION, "0") is None
    assert memory_limit(REGION, "2G") == 2 << 30
    with pytest.raises(ArbiterError, match="ARBITER_WORKER_MEMORY must be"):
        memory_limit(REGION, "lots")
    spec = tmp_path / "s.toml"
    spec.write_text('[[region]]\nname = "r"\nM = 8\nN = 16\nK = 8\nepilogue = ["bias"]\n')
    p = subprocess.run([sys.executable, "-m", "arbiter", "tune", str(spec), "--lanes", "numpy",
                        "--db", f"sqlite:///{tmp_path / 'a.db'}"], cwd=ROOT, text=True,
                       capture_output=True, timeout=120,
                       env=dict(os.environ, ARBITER_WORKER_MEMORY="lots"))
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1 and "ARBITER_WORKER_MEMORY" in lines[0]


def test_a_candidate_gets_its_timeout_and_no_more(fakes, monkeypatch):
    """A checked run of 5 s against a 4 s timeout, with a busy-machine wait of 30 s: waiting
    is the worker's own time, but the chance to wait must not lengthen the candidate's (it
    was given twice the wait more, whether it waited or not). Its output is wrong, so it
    would never be timed (nor wait) if it finished."""
    monkeypatch.setenv("FAKE_SLEEP", "5")
    with Worker(timeout=4) as w:
        assert _check(w, "numpy").status is Status.OK  # (the worker started)
        m = _check(w, "fake_sleepy_wrong", timing=Timing(warmup=1, rounds=2, wait=30.0))
    assert m.status is Status.TIMEOUT and "no result after 4 s" in m.log, m.log


def test_the_first_candidate_is_not_charged_the_workers_start_up(fakes, monkeypatch):
    """Two checked runs of 1 s each against a 4 s timeout, as the first request of a fresh
    worker: its start-up (seconds on a busy machine) is the worker's own time."""
    monkeypatch.setenv("FAKE_SLEEP", "1")
    with Worker(timeout=4) as w:
        m = _check(w, "fake_sleepy", timing=Timing(warmup=1, rounds=2))
        assert w.starts == 1
    assert m.status is Status.OK, m.log
