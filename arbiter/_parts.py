"""Memory-bound numpy passes over a large output, split across the cores a sweep leaves free;
and pieces of work independent of each other (each seed's inputs), side by side.

A sweep's parent process works beside its trial worker, so the worker's own helpers use every
core but one. numpy releases the GIL inside each ufunc call, so threads over contiguous parts
of an array run in parallel.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

__all__ = ["MAX_THREADS", "PART_MIN", "cores_but_one", "in_parts", "side_by_side", "usable_cores"]

A = TypeVar("A")
T = TypeVar("T")

# Measured by bench/oracle_parts.py (BENCHMARKS.md): on a 16-core host, comparing 512K
# elements on 2-15 threads was slower than on one (0.69 ms), 2M on 4 threads 1.6x faster, 32M
# on 8 threads 2.9x faster and on 15 slower than on 8 (memory-bound: more threads contend).
PART_MIN = 1 << 19  # elements per part at least
MAX_THREADS = 8

_POOL: list[tuple[int, ThreadPoolExecutor]] = []  # (threads, pool)
_POOL_LOCK = threading.Lock()


def usable_cores() -> int:
    """The CPUs this process may run on: its affinity mask (`taskset`, a container's or a
    batch job's CPU set), not the machine's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cores_but_one() -> int:
    return max(1, usable_cores() - 1)


def _bounds(n: int, align: int, parts: int) -> list[tuple[int, int]]:
    step = -(-n // parts)
    step = -(-step // align) * align
    return [(lo, min(n, lo + step)) for lo in range(0, n, step)]


def in_parts(n: int, work: Callable[[int, int], T], align: int = 1,
             threads: int | None = None, part_min: int = PART_MIN) -> list[T]:
    """`work(lo, hi)` over contiguous ranges that cover 0..n, in order, each starting at a
    multiple of `align`: one range when n is small or one core is free, else one per thread
    (`threads`; by default every core but one, `MAX_THREADS` at most), of `part_min` elements
    at least."""
    parts = min(threads or min(MAX_THREADS, cores_but_one()), n // part_min)
    if parts <= 1:
        return [work(0, n)]
    return list(_pool(parts).map(lambda r: work(*r), _bounds(n, align, parts)))


def side_by_side(work: Callable[[A], T], items: Sequence[A]) -> list[T]:
    """`work(item)` for each item, in order: on threads when more than one core is free (one
    per item, `MAX_THREADS` at most), else one after another in this thread. `work` must not
    wait on this module's pool itself (`in_parts` in parts): its tasks could wait for ever."""
    threads = min(len(items), MAX_THREADS, cores_but_one())
    if threads <= 1:
        return [work(x) for x in items]
    return list(_pool(threads).map(work, items))


def _pool(threads: int) -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if not _POOL or _POOL[0][0] < threads:
            # a smaller pool is left to its callers, never shut down under them; its idle
            # threads end when it is collected
            size = max(threads, MAX_THREADS)
            _POOL[:] = [(size, ThreadPoolExecutor(size, thread_name_prefix="arbiter-parts"))]
        return _POOL[0][1]


def _forget_pool() -> None:
    # a forked child has none of the pool's threads: it makes its own
    _POOL.clear()
    global _POOL_LOCK
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)
