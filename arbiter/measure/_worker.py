"""Trials in isolation: the parent's side of the worker process (`_child`).

A candidate is checked and timed in a child process with a deadline. A reply that does not
come in time kills the child (TIMEOUT); a child that dies mid-request (segfault, abort,
os._exit) is a CRASHED result with the tail of its stderr as the log. Either way the next
request starts a fresh child, so one bad candidate costs one trial, never the sweep. The child
leads a process group of its own, killed whole, so whatever a kernel started goes with it, and
it dies with its parent (Linux).
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

from .._errors import ArbiterError
from ..lane import Artifact, Status
from ..region import is_real
from ._child import HEADER, write_message
from ._measurement import Measurement
from ._trial import Timing

__all__ = ["MAX_TIMEOUT", "Worker", "checked_timeout"]

LOG_TAIL = 4000
MAX_TIMEOUT = 7 * 24 * 3600.0


def checked_timeout(timeout: object) -> float:
    """A candidate's timeout in seconds, or one line on what is wrong with it."""
    if not is_real(timeout) or not 0 < timeout <= MAX_TIMEOUT:
        raise ArbiterError(f"--timeout must be a number of seconds above 0 and at most "
                           f"{MAX_TIMEOUT:g}, got {timeout!r}")
    return float(timeout)


class _Dead(Exception):
    def __init__(self, status: Status, log: str) -> None:
        super().__init__(log)
        self.status, self.log = status, log


class Worker:
    """A restartable child process; one request at a time, each with a deadline."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = checked_timeout(timeout)
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

    def _call(self, req: dict[str, Any], timeout: float, allowance: float = 0.0) -> Any:
        """The reply to `req`, within `timeout` seconds plus `allowance` (the arbiter's own
        waiting, not the candidate's)."""
        offset = self._log.seek(0, os.SEEK_END)
        proc = self._start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            write_message(proc.stdin, req)  # type: ignore[arg-type]
        except BrokenPipeError:
            pass  # it died before reading; the read below says how
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout + allowance
        buf = b""
        need = HEADER.size
        try:
            while len(buf) < need:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    self._kill()
                    waits = f" (+{allowance:g} s for a busy machine)" if allowance else ""
                    raise _Dead(Status.TIMEOUT, f"no result after {timeout:g} s{waits}; "
                                f"worker killed\n{self._log_since(offset)}")
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    code = proc.poll()
                    self._kill()
                    code = proc.returncode if code is None else code
                    how = (f"killed by {signal.Signals(-code).name}" if code < 0
                           else f"exited with code {code}")
                    raise _Dead(Status.CRASHED, f"worker {how}\n{self._log_since(offset)}")
                buf += chunk
                if need == HEADER.size and len(buf) >= HEADER.size:
                    need += HEADER.unpack(buf[:HEADER.size])[0]
        except BaseException:
            if self.proc is not None and not isinstance(sys.exc_info()[1], _Dead):
                self._kill()  # interrupted mid-request: its late reply must answer nothing
            raise
        kind, value = pickle.loads(buf[HEADER.size:need])
        if kind == "error":
            raise _Dead(Status.LAUNCH_FAILED, value)
        return value

    def check(self, lane: str, region: Any, artifact: Artifact, budget: float, *,
              seeds: Sequence[int], ceiling: float | None = None,
              timing: Timing | None = None) -> Measurement:
        """Verify a built candidate on `seeds`' inputs, then time it as `timing` says (None:
        verify only). Failures are Measurements."""
        req = {"op": "check", "lane": lane, "region": region, "artifact": artifact,
               "budget": budget, "ceiling": ceiling or budget, "seeds": list(seeds),
               "timing": timing}
        # waiting for a busy machine (twice at most) is the arbiter's time, not the candidate's
        waits = 2 * timing.wait if timing is not None else 0.0
        try:
            m: Measurement = self._call(req, self.timeout, waits)
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
