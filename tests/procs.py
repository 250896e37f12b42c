"""The tests' view of running processes, from /proc (Linux)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Proc:
    pid: int
    name: str
    state: str  # "Z": a zombie, exited but not reaped
    ppid: int
    group: int


def proc(pid: int) -> Proc | None:
    """The process `pid`, None when there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, ppid, group = text[text.rindex(")") + 2:].split()[:3]
    return Proc(pid, text[text.index("(") + 1:text.rindex(")")], state, int(ppid), int(group))


def every() -> Iterator[Proc]:
    """Every process, zombies included."""
    for entry in Path("/proc").iterdir():
        p = proc(int(entry.name)) if entry.name.isdigit() else None
        if p is not None:
            yield p


def live() -> Iterator[Proc]:
    """Every process not a zombie."""
    return (p for p in every() if p.state != "Z")


def soon(condition: Callable[[], bool], within: float = 5.0) -> bool:
    """Does `condition` hold within `within` seconds? (A SIGKILL is delivered, and a killed
    process reaped, a moment after the kill returns.)"""
    end = time.monotonic() + within
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def rss_mb(pid: int) -> float:
    """The resident memory of `pid`, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def threads(pid: int) -> set[str]:
    """The ids of `pid`'s threads now."""
    return {t.name for t in Path(f"/proc/{pid}/task").iterdir()}


def cpu_ns(pid: int, *, leave_out: set[str] | frozenset[str] = frozenset()) -> int:
    """The CPU time of every thread of `pid` so far but those in `leave_out` (their ids), in
    ns (the scheduler's own count)."""
    total = 0
    for t in Path(f"/proc/{pid}/task").iterdir():
        if t.name in leave_out:
            continue
        try:
            total += int((t / "schedstat").read_text().split()[0])
        except OSError:  # a thread that ended while they were listed
            pass
    return total
