"""Host-side timing for CPU lanes, and the CPUs this process may use."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

__all__ = ["HOST_METHOD", "time_host", "usable_cores"]

HOST_METHOD = "monotonic_ns"


def time_host(
    call: Callable[[int], object], n_sets: int, *, warmup: int, repeats: int
) -> list[float]:
    """Time `call(i)` (i = which input set) `repeats` times after `warmup` calls; seconds."""
    if n_sets < 1 or repeats < 1 or warmup < 0:
        raise ValueError("need at least one input set and one repeat")
    for i in range(warmup):
        call(i % n_sets)
    samples = []
    clock = time.perf_counter_ns
    for i in range(repeats):
        t0 = clock()
        call(i % n_sets)
        samples.append((clock() - t0) * 1e-9)
    return samples


def usable_cores() -> int:
    """The CPUs this process may run on: its affinity mask (`taskset`, a container's or a
    batch job's CPU set), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
