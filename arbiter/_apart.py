"""The parent and its trial worker on cores of their own while the worker waits for it.

Woken by the parent's request (or its go), the worker was often placed on the parent's core,
where it ran while the parent waited to finish its write or yielded to it. So, for the length
of a request, the parent's thread keeps to one core of its set (`Parent`), and the worker's
main thread waits for the parent's messages on the others (`Worker.waiting`): woken there, it
stays there unless the scheduler moves it. Between the waits it may use every core, as the
threads a kernel starts do (they inherit it). Linux only; with one core there is nothing to
keep apart.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from types import TracebackType

__all__ = ["Apart", "Parent", "Worker"]

Apart = tuple[tuple[int, ...], int]  # the parent's cores, and the one it keeps to


def _set(cores: set[int] | tuple[int, ...]) -> bool:
    try:
        os.sched_setaffinity(0, cores)  # the calling thread only
    except (AttributeError, OSError, ValueError):  # a core taken away meanwhile, or not Linux
        return False
    return True


class Parent:
    """The parent's side, around one request: its thread keeps to the last core of its set;
    `apart` tells the worker which (None where there is one core, or no affinity)."""

    def __init__(self) -> None:
        self.cores: set[int] = set()
        self.apart: Apart | None = None

    def __enter__(self) -> Parent:
        try:
            self.cores = os.sched_getaffinity(0)
        except (AttributeError, OSError):
            return self
        if len(self.cores) > 1 and _set({max(self.cores)}):
            self.apart = (tuple(sorted(self.cores)), max(self.cores))
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.apart is not None:
            _set(self.cores)


class Worker:
    """The worker's side: `follow` the latest request's `apart`, and wait for messages off
    the parent's core."""

    def __init__(self) -> None:
        self.apart: Apart | None = None

    def follow(self, apart: Apart | None) -> None:
        self.apart = apart

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        if self.apart is None:
            yield
            return
        cores, parents = self.apart
        moved = _set(tuple(c for c in cores if c != parents))
        try:
            yield
        finally:
            if moved:
                _set(cores)
