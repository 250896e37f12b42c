"""The trial worker's protocol: the parent's own work overlaps build and check, never timing."""

from __future__ import annotations

import time

import pytest

from arbiter import Config, FusedRegion, Status
from arbiter._worker import Worker

REGION = FusedRegion(16, 32, 8, name="w", epilogue=("bias", "gelu"))


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
