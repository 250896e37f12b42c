"""Host-side timing for CPU lanes: monotonic clock around each call, inputs rotated."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["HOST_METHOD", "time_host"]

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
