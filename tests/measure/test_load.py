"""The machine's load as the worker reads it: a neighbour's CPU use is seen and waited out,
this process's own (and its parent's) is not counted."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from arbiter.measure import BUSY, Load

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/stat") or
                                not hasattr(os, "sched_getaffinity"),
                                reason="the load is read from Linux's /proc")


def _neighbours() -> list[subprocess.Popen[bytes]]:
    """A busy process on each CPU this process may use."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in os.sched_getaffinity(0)]


def _quiet_or_skip(load: Load) -> None:
    time.sleep(0.3)
    if (load.now() or 0) > BUSY:
        pytest.skip("the machine is busy with other work already")


def test_a_busy_neighbour_is_seen_and_waited_for_and_its_end_too():
    load = Load()
    _quiet_or_skip(load)
    procs = _neighbours()
    try:
        time.sleep(0.5)
        busy = load.now()
        assert busy is not None and busy > 0.5
        t0 = time.monotonic()
        after, waited = load.quiet(0.55)
        # the wait is an allowance added to a candidate's timeout: it must not run over
        assert after is not None and after > BUSY and 0.55 <= waited < 0.6
        assert time.monotonic() - t0 < 0.65
    finally:
        for p in procs:
            p.kill()
            p.wait()
    time.sleep(0.3)
    quiet, waited = load.quiet(5.0)
    assert quiet is not None and quiet < BUSY and waited < 5.0


def test_this_processs_own_work_is_not_a_neighbours():
    load = Load()
    _quiet_or_skip(load)
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # busy here, in the process that reads the load
        pass
    own = load.now()
    assert own is not None and own < BUSY
