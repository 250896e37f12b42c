"""The machine's load while a candidate is timed: the share of this process's CPUs that other
processes used, read from the kernel's tick counts (Linux `/proc`). A timing waits for a busy
machine to quiet down (briefly), and every measurement records the load it was taken under.
Elsewhere the load is unknown (None) and nothing waits."""

from __future__ import annotations

import collections
import os
import time
from collections.abc import Callable, Iterable

__all__ = ["BUSY", "WINDOW", "Load"]

BUSY = 0.20  # others' share of this process's CPUs above which the machine is busy
WINDOW = 0.1  # seconds: the shortest span a load is read over (the kernel counts 10 ms ticks)

_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # user nice system irq softirq steal (of /proc/stat's cpuN)
_IDLE_FIELDS = (3, 4)  # idle iowait


class Load:
    """Reads of others' CPU use on this process's CPUs; `pids` count as this process (its
    parent, whose own work is not a neighbour's)."""

    def __init__(self, pids: Iterable[int] = (),
                 waiting: Callable[[bool], None] | None = None) -> None:
        self.pids = (os.getpid(), *pids)
        self.waiting = waiting  # told when a wait for a quiet machine starts (True) and ends
        try:
            self.cpus = {f"cpu{c}" for c in os.sched_getaffinity(0)}
        except AttributeError:
            self.cpus = set()
        first = self._read()
        self.marks: collections.deque[tuple[float, int, int]] = collections.deque(
            [first] if first else [], maxlen=256)

    def _read(self) -> tuple[float, int, int] | None:
        """(monotonic time, ticks others used on our CPUs, all ticks of our CPUs)."""
        try:
            with open("/proc/stat") as f:
                busy = total = 0
                for line in f:
                    name, _, rest = line.partition(" ")
                    if name in self.cpus:
                        v = [int(x) for x in rest.split()]
                        b = sum(v[i] for i in _BUSY_FIELDS)
                        busy += b
                        total += b + sum(v[i] for i in _IDLE_FIELDS)
            own = 0
            for pid in self.pids:
                with open(f"/proc/{pid}/stat") as f:
                    text = f.read()
                own += sum(int(x) for x in text[text.rindex(")") + 2:].split()[11:15])
        except (OSError, ValueError, IndexError):
            return None
        return time.monotonic(), busy - own, total

    def now(self) -> float | None:
        """Others' share of our CPUs since the newest mark at least `WINDOW` old (or the
        oldest one); a mark is taken now."""
        r = self._read()
        if r is None or not self.marks:
            return None
        base = self.marks[0]
        for m in reversed(self.marks):
            if r[0] - m[0] >= WINDOW:
                base = m
                break
        self.marks.append(r)
        ticks = r[2] - base[2]
        if ticks <= 0:
            return None
        return min(1.0, max(0.0, (r[1] - base[1]) / ticks))

    def quiet(self, max_wait: float) -> tuple[float | None, float]:
        """Wait, `WINDOW` at a time, until the load is under `BUSY`, at most `max_wait`
        seconds; the last load read and the seconds waited."""
        start = time.monotonic()
        load, waited = self.now(), 0.0
        waits = load is not None and load > BUSY and max_wait > 0
        if waits and self.waiting is not None:
            self.waiting(True)
        while load is not None and load > BUSY and waited < max_wait:
            time.sleep(min(WINDOW, max_wait - waited))  # never past max_wait: it is an allowance
            waited = time.monotonic() - start
            load = self.now()
        if waits and self.waiting is not None:
            self.waiting(False)
        return load, waited
