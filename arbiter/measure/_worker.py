"""Trials in isolation: the parent's side of the worker process (`_child`).

A candidate is checked and timed in a child process with a deadline. A reply that does not
come in time kills the child (TIMEOUT); a child that dies mid-request (segfault, abort,
os._exit) is a CRASHED result with the tail of its stderr as the log. Either way the next
request starts a fresh child, so one bad candidate costs one trial, never the sweep. The child
leads a process group of its own, killed whole, so whatever a kernel started goes with it, and
it dies with its parent (Linux).

Only the candidate's own time counts against its timeout: the child says when the worker's own
part of a request (its start-up, the inputs and their float64 reference, waiting for a busy
machine) ends and starts again, and the deadline waits meanwhile (that part has a limit of its
own, `PREPARE_LIMIT`). A child holding more memory than its limit (`memory_limit`: anonymous
and shared memory it made, looked at every `POLL` seconds) is killed: OUT_OF_MEMORY. The limit
is on what the process holds, not on its address space, which a GPU runtime reserves by the
terabyte.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from .._errors import ArbiterError
from ..lane import Artifact, Status
from ..region import input_shapes, is_real, numpy_dtype, output_shape
from ..settings import settings
from ._child import HEADER, write_message
from ._measurement import Measurement
from ._trial import Timing

__all__ = ["MAX_TIMEOUT", "Worker", "checked_timeout", "memory_limit"]

LOG_TAIL = 4000
MAX_TIMEOUT = 7 * 24 * 3600.0
PREPARE_LIMIT = 600.0  # seconds the worker's own part of a request may take, each time
POLL = 0.1  # seconds between looks at a running request's memory
# Without ARBITER_WORKER_MEMORY, a worker may hold this much beyond its region's arrays (the
# interpreter, the libraries, a GPU runtime's host side, a kernel's scratch) plus this many
# times their bytes (the inputs and their copies, the float64 references, outputs).
WORKER_MEMORY = 4 << 30
DATA_FACTOR = 12
_UNITS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def checked_timeout(timeout: object) -> float:
    """A candidate's timeout in seconds, or one line on what is wrong with it."""
    if not is_real(timeout) or not 0 < timeout <= MAX_TIMEOUT:
        raise ArbiterError(f"--timeout must be a number of seconds above 0 and at most "
                           f"{MAX_TIMEOUT:g}, got {timeout!r}")
    return float(timeout)


def memory_limit(region: Any = None, text: str | None = None) -> int | None:
    """Bytes a worker may hold while it checks and times a candidate of `region`; None: no
    limit. `text` (default ARBITER_WORKER_MEMORY): a size in bytes with an optional K, M, G
    or T (powers of 1024), a share of this machine's memory ("50%"), or 0 for none; empty:
    `WORKER_MEMORY` plus `DATA_FACTOR` times the bytes of the region's arrays."""
    text = (settings().worker_memory if text is None else text).strip().lower()
    if not text:
        try:
            arrays = [*input_shapes(region).values(), output_shape(region)]
            data = sum(int(np.prod(s)) for s in arrays) * numpy_dtype(region.dtype).itemsize
        except (AttributeError, TypeError, ValueError, KeyError):
            data = 0  # (not a region: the request fails by itself)
        return WORKER_MEMORY + DATA_FACTOR * data
    number, unit = text.removesuffix("b").removesuffix("i"), 1
    try:
        if number.endswith("%"):
            share = float(number[:-1])
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
            if not 0 < share <= 100:
                raise ValueError(text)
            return int(total * share / 100)
        if number[-1:] in _UNITS:
            number, unit = number[:-1], _UNITS[number[-1]]
        value = float(number)
        if not 0 <= value * unit < 1 << 62:  # (NaN too)
            raise ValueError(text)
    except (ValueError, OSError):
        raise ArbiterError(f"ARBITER_WORKER_MEMORY must be a size such as 8G or 50% (of this "
                           f"machine's memory), or 0 for no limit; got {text!r}") from None
    return None if value == 0 else int(value * unit)


def _held(pid: int) -> int | None:
    """Bytes of memory the process `pid` made (anonymous and shared memory, not the files it
    maps, its libraries among them), from Linux's /proc; None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return sum(int(line.split()[1]) * 1024 for line in f
                       if line.startswith(("RssAnon:", "RssShmem:")))
    except (OSError, ValueError, IndexError):
        return None


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB"


class _Dead(Exception):
    def __init__(self, status: Status, log: str) -> None:
        super().__init__(log)
        self.status, self.log = status, log


class Worker:
    """A restartable child process; one request at a time, each with a deadline."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = checked_timeout(timeout)
        memory_limit()  # (a malformed ARBITER_WORKER_MEMORY: one line, before any request)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._log = tempfile.TemporaryFile()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None:
            # the parent-death signal follows the thread that started the child
            parent = ([f"--parent={os.getpid()}"]
                      if threading.current_thread() is threading.main_thread() else [])
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "arbiter.measure._child", *parent],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                close_fds=True, start_new_session=True)
            self.starts += 1
        return self.proc

    def _kill(self) -> None:
        """Kill the child's whole group (a dead child's pid, unreaped, still names it)."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
        self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # the child's loop ends at end of file
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5.0)
        self._kill()

    def _log_since(self, offset: int) -> str:
        self._log.seek(offset)
        text = self._log.read().decode(errors="replace")
        self._log.seek(0, os.SEEK_END)
        return text[-LOG_TAIL:]

    def _call(self, req: dict[str, Any], timeout: float) -> Any:
        """The reply to `req`, the candidate's part of it within `timeout` seconds."""
        offset = self._log.seek(0, os.SEEK_END)
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            write_message(proc.stdin, req)  # type: ignore[arg-type]
        except BrokenPipeError:
            pass  # it died before reading; the read below says how
        fd = proc.stdout.fileno()
        memory = memory_limit(req.get("region"))
        own, since = True, time.monotonic()  # the worker's own part first: start-up, inputs
        left, own_seconds = timeout, 0.0  # the candidate's seconds left; the worker's so far
        buf = b""
        try:
            while True:
                now = time.monotonic()
                remaining = since + (PREPARE_LIMIT if own else left) - now
                if remaining <= 0:
                    self._kill()
                    own_seconds += now - since if own else 0.0
                    raise _Dead(Status.TIMEOUT, f"{self._late(timeout, own, own_seconds)}\n"
                                f"{self._log_since(offset)}")
                ready = select.select([fd], [], [], min(remaining, POLL))[0]
                held = None if memory is None else _held(proc.pid)
                if held is not None and memory is not None and held > memory:
                    self._kill()
                    raise _Dead(Status.OUT_OF_MEMORY, (
                        f"the worker held {_gib(held)}, over its limit of {_gib(memory)} "
                        f"(ARBITER_WORKER_MEMORY); worker killed\n{self._log_since(offset)}"))
                if not ready:
                    continue
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    code = proc.poll()
                    self._kill()
                    code = proc.returncode if code is None else code
                    how = (f"killed by {signal.Signals(-code).name}" if code < 0
                           else f"exited with code {code}")
                    raise _Dead(Status.CRASHED, f"worker {how}\n{self._log_since(offset)}")
                buf += chunk
                while len(buf) >= HEADER.size:
                    end = HEADER.size + HEADER.unpack(buf[:HEADER.size])[0]
                    if len(buf) < end:
                        break
                    kind, value = pickle.loads(buf[HEADER.size:end])
                    buf = buf[end:]
                    if kind == "error":
                        raise _Dead(Status.LAUNCH_FAILED, value)
                    if kind != "own":
                        return value
                    now = time.monotonic()  # the worker's own part starts (True) or ends
                    if own:
                        own_seconds += now - since
                    else:
                        left -= now - since
                    own, since = bool(value), now
        except BaseException:
            if self.proc is not None and not isinstance(sys.exc_info()[1], _Dead):
                self._kill()  # interrupted mid-request: its late reply must answer nothing
            raise

    @staticmethod
    def _late(timeout: float, own: bool, own_seconds: float) -> str:
        if own:
            return (f"the worker's own part of the request (start-up, inputs and their "
                    f"reference) took over {PREPARE_LIMIT:g} s; worker killed")
        also = (f" (besides {own_seconds:.2g} s of the worker's own: start-up, inputs, "
                "waiting for a busy machine)" if own_seconds >= 0.01 else "")
        return f"no result after {timeout:g} s{also}; worker killed"

    def check(self, lane: str, region: Any, artifact: Artifact, budget: float, *,
              seeds: Sequence[int], ceiling: float | None = None,
              timing: Timing | None = None) -> Measurement:
        """Verify a built candidate on `seeds`' inputs, then time it as `timing` says (None:
        verify only). Failures are Measurements."""
        req = {"op": "check", "lane": lane, "region": region, "artifact": artifact,
               "budget": budget, "ceiling": ceiling or budget, "seeds": list(seeds),
               "timing": timing}
        try:
            m: Measurement = self._call(req, self.timeout)
        except _Dead as d:
            m = Measurement(d.status, compile_seconds=artifact.compile_seconds, log=d.log)
        return replace(m, resources=artifact.resources)  # what it used, whatever became of it

    def finals(self, region: Any, entries: Sequence[tuple[str, Artifact]], budget: float, *,
               seeds: Sequence[int], timing: Timing) -> list[Measurement]:
        """Check the finalists again, then time them in interleaved rounds; one Measurement
        each, in order."""
        req = {"op": "finals", "region": region, "entries": list(entries), "budget": budget,
               "seeds": list(seeds), "timing": timing}
        limit = max(self.timeout * len(entries), timing.max_seconds + self.timeout)
        try:
            return self._call(req, limit)  # type: ignore[no-any-return]
        except _Dead as d:
            return [Measurement(d.status, log=f"finalists' re-timing: {d.log}")] * len(entries)
