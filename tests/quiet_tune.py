"""`arbiter` as its console script runs it, but with timings that never wait for a busy machine
(`python -m tests.quiet_tune tune ...`): the fault tests kill, fill and race it, and other
processes on the machine would only slow them (each timing waits up to 2 s for them to leave
this process's CPUs)."""

from __future__ import annotations

import functools
import sys

from arbiter import api
from arbiter.cli import console
from arbiter.measure import Timing

api.Timing = functools.partial(Timing, wait=0.0)  # type: ignore[misc]

if __name__ == "__main__":
    sys.exit(console())
