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
