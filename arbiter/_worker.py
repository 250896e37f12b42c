"""Trials in isolation: the parent's side of the trial worker, a process that builds, checks
and times candidates (`_worker_child`).

`Worker` starts `python -m arbiter._worker_child`, sends pickled requests on its stdin and
reads pickled replies from a private pipe. A reply that does not come within the timeout kills
the child (TIMEOUT); a child that dies mid-request (segfault, abort, os._exit) is a CRASHED
result with the tail of its stderr as the log. Either way the next request starts a fresh
child, so one bad candidate costs one trial, never the sweep.

The child times a candidate only after the parent's "go", sent once the parent's own work for
the previous trial is done (`check`'s `meanwhile`); the go may name the candidate expected
next, for the child to compile ahead. Before its own start-up, the parent may name the sweep's
lane defaults and the first region's seeds (`build_early`): they compile, and the references
are made, while it imports and opens its records. The candidate expected next may also be sent
ahead, after the current one's go: the child takes it up the moment it has replied, and its
own go may call it off. A worker that ran CPU lanes alone is kept between sweeps (`lease`).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ._errors import ArbiterError
from ._region import is_real
from ._values import Config, Measurement, Status
from ._worker_child import (
    HEADER,
    SETTINGS_PREFIX,
    Interleaved,
    Outcome,
    cpu_lane,
    send,
    settings_now,
)

__all__ = ["Interleaved", "Outcome", "Worker", "lease"]

Meanwhile = Callable[[], "tuple[str, Config] | None"] | None
LOG_TAIL = 4000
# a worker this old is not kept for another sweep: the x86 lane's libraries stay mapped in it
RETIRE_AFTER = 2000
# How long an OpenMP kernel's threads (libgomp) spin once a run ends, before they sleep. The
# default, 300,000 spins, is 10-20 ms: in a sweep that is every gap between runs, so a kernel
# of N threads kept N cores busy while the worker compared outputs and the parent asked and
# recorded. 10,000 spins (~0.5 ms) still outlast the microseconds between the runs of a timing
# (the per-config medians of a sweep were unchanged, BENCHMARKS.md). A user's own setting
# (either variable) stands.
OPENMP_IDLE = {"GOMP_SPINCOUNT": "10000"}


def _send_to(proc: subprocess.Popen[bytes], obj: Any) -> None:
    assert proc.stdin is not None
    try:
        send(proc.stdin.fileno(), obj)
    except BrokenPipeError:
        pass  # it died before reading; the read that follows reports how


def _child_env() -> dict[str, str]:
    if "GOMP_SPINCOUNT" in os.environ or "OMP_WAIT_POLICY" in os.environ:
        return dict(os.environ)
    return {**os.environ, **OPENMP_IDLE}


@dataclass(frozen=True)
class _SentAhead:
    """A check request sent before its turn: the child takes it up as soon as it has replied
    to the one before."""

    req: dict[str, Any]
    offset: int  # the log's end when it was sent


class _Dead(Exception):
    def __init__(self, status: Status, log: str) -> None:
        super().__init__(log)
        self.status, self.log = status, log


MAX_TIMEOUT = 7 * 24 * 3600.0


def checked_timeout(timeout: object) -> float:
    """A candidate's timeout in seconds, or one line on what is wrong with it."""
    if not is_real(timeout) or not 0 < timeout <= MAX_TIMEOUT:
        raise ArbiterError(f"--timeout must be a number of seconds above 0 and at most "
                           f"{MAX_TIMEOUT:g}, got {timeout!r}")
    return float(timeout)


class Worker:
    """A restartable child process; one request at a time, each with a deadline."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.requests = 0
        self.lanes: set[str] = set()  # every lane asked of it
        self.gpu = False  # one of them is not a CPU lane
        self.busy = False  # a request sent, its reply not read (the caller was interrupted)
        self.ahead: _SentAhead | None = None  # a check sent before its turn (`check`)
        self.off: _SentAhead | None = None  # one called off, its reply not read yet
        self.replied = 0.0  # when the last reply was read (perf_counter)
        self.started = 0.0  # when the child could start on the request of the last call
        self.hinted = False  # told to build early: it may run compilers before any request
        self._early = False  # builds hinted since the last request: it waits for one
        self._chore: Callable[[], bool] | None = None  # parent work, a step per window
        self._seeds: dict[Any, list[int]] = {}  # regions whose cases a hint named: their seeds
        self._built_early: dict[Any, list[tuple[str, Config]]] = {}  # region -> hinted builds
        self._log = tempfile.TemporaryFile()
        self._table_sent = False  # the lanes' entry points, to the child running now

    @property
    def timeout(self) -> float:
        return self._timeout

    @timeout.setter
    def timeout(self, timeout: float) -> None:
        self._timeout = checked_timeout(timeout)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the child now, for a sweep: it waits for the sweep's hint (`build_early`)
        before it imports numpy and the oracle, which then overlap its first compiles, and
        the compiles the caller's own start-up."""
        self._start(hint_first=True)

    def _start(self, hint_first: bool = False) -> subprocess.Popen[bytes]:
        if self.proc is None or not _running(self.proc):
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "arbiter._worker_child", *(["--hint-first"] * hint_first),
                 # (the parent-death signal follows the thread that started it: only the main
                 # thread's end is the process's)
                 *([f"--parent={os.getpid()}"]
                   * (threading.current_thread() is threading.main_thread()))],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                # a group of its own: what a kernel starts goes with it (`_kill`)
                close_fds=True, env=_child_env(), start_new_session=True)
            self.starts += 1
            self._table_sent = False
        return self.proc

    def _news(self) -> dict[str, Any]:
        """What goes with every message: the settings it follows, and the lanes' entry points
        once (when this process has scanned them: the child then skips its own scan)."""
        news: dict[str, Any] = {"settings": settings_now()}
        if not self._table_sent:
            from ._registry import installed_table

            table = installed_table()
            if table is not None:
                news["lanes"], self._table_sent = table, True
        return news

    def _kill(self) -> None:
        self.ahead = self.off = None  # they go with the child
        if self.proc is not None and _running(self.proc):
            if self.requests or self.hinted:
                # the compilers it started lead groups of their own: stopped, it starts no
                # other while they are found and killed
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGSTOP)
                from ._build import kill_tools_of

                kill_tools_of(self.proc.pid)
            _kill_group(self.proc.pid)
            self.proc.wait()
        self.proc = None
        self.busy = False

    def alive(self) -> bool:
        return self.proc is not None and _running(self.proc)

    def build_early(self, candidates: Sequence[tuple[Any, str, Config]],
                    cases: tuple[Any, list[int]] | None = None) -> None:
        """Have the child compile these (region, lane, config) candidates now, in order, in
        the background (CPU lanes only), for the requests to come: a hint, with no reply. The
        next request stops them: no other compile starts; one in the region of the compile
        under way waits for it before it checks anything, any other kills it.

        `cases`, a region and seeds: the child then makes their inputs and references, and
        `seeds_for` hands those seeds to the region's sweep. `named_early` hands each region's
        sweep the candidates named for it."""
        self.call_off()
        if self.busy or self._early or not (candidates or cases):
            return  # (a hint not yet taken up by a request: a second one would stop its compile)
        self.hinted = True
        self._early = bool(candidates)  # (cases alone: a later hint may name compiles)
        if cases is not None:
            self._seeds[cases[0]] = list(cases[1])
        for region, lane, config in candidates:
            self._built_early.setdefault(region, []).append((lane, config))
        proc = self._start()
        _send_to(proc, {"op": "early", "candidates": list(candidates), "cases": cases,
                        **self._news()})

    def seeds_for(self, region: Any) -> list[int]:
        """The seeds of `region`'s cases named in a hint (once), else fresh ones."""
        from ._check import fresh_seeds

        return self._seeds.pop(region, None) or fresh_seeds(2)

    def named_early(self, region: Any) -> list[tuple[str, Config]]:
        """The (lane, config) candidates of `region` named in hints, in order (once)."""
        return self._built_early.pop(region, [])

    def between_trials(self, chore: Callable[[], bool] | None) -> None:
        """Parent work done a step at a time, one step in each check's window after its
        `meanwhile` (so never beside a timing), until a step returns False; None drops it."""
        self._chore = chore

    def _asked(self, lanes: Iterable[str]) -> None:
        """Note the lanes about to run in the child, and whether any is not a CPU lane (one
        that cannot say counts as not)."""
        for name in set(lanes) - self.lanes:
            self.lanes.add(name)
            self.gpu = self.gpu or not cpu_lane(name)

    def reusable(self) -> bool:
        """Worth keeping for another sweep: alive, idle, has served (one started ahead and
        never asked anything is not kept), not too old, and only CPU lanes ran in it (a GPU
        lane's context would hold device memory for as long as it idles)."""
        return (self.alive() and not self.busy and self.ahead is None and self.off is None
                and not self.gpu and 0 < self.requests < RETIRE_AFTER)

    def idle(self) -> None:
        """Have the child drop what the last sweep left in it, before it waits for the next.
        No reply is awaited (its collection takes 10-20 ms): the next request waits for it."""
        self._early = False
        self._seeds.clear()  # a region the sweep never reached: the next sweep draws its own
        self._built_early.clear()
        self.call_off()
        if self.alive() and not self.busy:
            assert self.proc is not None
            _send_to(self.proc, {"op": "forget"})

    def close(self) -> None:
        self.ahead = self.off = None  # (a check sent ahead ends at its go: stdin closes)
        if not self.requests or self.busy:
            # started ahead and never needed, or a request left unanswered (an interrupt):
            # nothing to finish
            self._kill()
        if self.proc is not None and _running(self.proc):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                _ended(self.proc, 5.0)
            except subprocess.TimeoutExpired:
                self._kill()
        self.proc = None

    def _log_since(self, offset: int) -> str:
        self._log.seek(offset)
        text = self._log.read().decode(errors="replace")
        self._log.seek(0, os.SEEK_END)
        return text[-LOG_TAIL:]

    def call_off(self, wait: bool = True) -> None:
        """Call off the check sent ahead, if one is: its go says so, and the child stops at
        its next check-in and replies without a result. That reply is read now, or with
        `wait` False by whatever is asked of the worker next."""
        ahead, self.ahead = self.ahead, None
        if ahead is not None and not self.busy and self.alive():
            assert self.proc is not None
            _send_to(self.proc, {"op": "go", "off": True})
            self.off = ahead
        if wait:
            self._called_off()

    def _called_off(self) -> None:
        off, self.off = self.off, None
        if off is not None and self.proc is not None:
            self.busy = True
            with contextlib.suppress(_Dead):
                self._reply(self.proc, off.offset, self.timeout)

    def _request(self, proc: subprocess.Popen[bytes], req: dict[str, Any]) -> int:
        """Send a request with the settings it follows; the log's end before it."""
        self.requests += 1
        offset = self._log.seek(0, os.SEEK_END)
        _send_to(proc, {**req, **self._news()})
        return offset

    def _send_ahead(self, proc: subprocess.Popen[bytes], req: dict[str, Any]) -> None:
        self._asked([req["lane"]])
        self.ahead = _SentAhead(req, self._request(proc, {**req, "ahead": True}))

    def _call(self, req: dict[str, Any], timeout: float, meanwhile: Meanwhile = None,
              send_next: bool = False) -> Any:
        ahead = self.ahead
        if ahead is not None and ahead.req != req:
            self.call_off()
            ahead = None
        self.ahead = None
        self._called_off()
        if self.busy:
            self._kill()  # interrupted in a request: its late reply must not answer this one
        # the first request after a hint waits for the compile under way: one more deadline
        timeout, self._early = timeout * (2 if self._early else 1), False
        if ahead is not None and self.alive():
            assert self.proc is not None
            proc, offset = self.proc, ahead.offset
            self.started = self.replied  # taken up when the last reply went
        else:
            self.started = time.perf_counter()
            proc = self._start()
            offset = self._request(proc, req)
            # The child, woken by its last reply's read, is often still queued on this core:
            # let it take the request now. Without this, the parent's `meanwhile` ran first
            # and the child waited 1-5 ms in a third of trials while the other core idled.
            os.sched_yield()
        self.busy = True
        if req["op"] == "check":
            expected = self._meanwhile_then_go(proc, meanwhile)
            if send_next and expected is not None:
                # the child takes it up the moment it has replied to this one
                self._send_ahead(proc, {**req, "lane": expected[0], "config": expected[1]})
        return self._reply(proc, offset, timeout)

    def _reply(self, proc: subprocess.Popen[bytes], offset: int, timeout: float) -> Any:
        """The reply to the request in the child; its value (None: called off)."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        buf = b""
        need = HEADER.size
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self._kill()
                raise _Dead(Status.TIMEOUT, f"no result after {timeout:g} s; worker killed\n"
                            + self._log_since(offset))
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                code = _reaped(proc)  # (what its kernel started goes too)
                self.proc = None
                self.busy = False
                self.ahead = self.off = None
                how = (f"killed by {signal.Signals(-code).name}" if code < 0
                       else f"exited with code {code}")
                raise _Dead(Status.CRASHED, f"worker {how}\n" + self._log_since(offset))
            buf += chunk
            if len(buf) >= HEADER.size:
                need = HEADER.size + HEADER.unpack(buf[:HEADER.size])[0]
            if len(buf) >= need and need > HEADER.size:
                kind, value = pickle.loads(buf[HEADER.size:need])
                self.busy = False
                self.replied = time.perf_counter()
                if kind == "error":
                    raise _Dead(Status.LAUNCH_FAILED, value)
                return value

    def _meanwhile_then_go(self, proc: subprocess.Popen[bytes],
                           meanwhile: Meanwhile) -> tuple[str, Config] | None:
        """Run the parent's work, then send the go naming the candidate it expects next
        (returned too)."""
        assert proc.stdin is not None
        try:
            expected = meanwhile() if meanwhile is not None else None
            if self._chore is not None and not self._chore():
                self._chore = None
        except BaseException:
            # the parent's own error, never the candidate's: it propagates, and the child goes
            # (its reply would be read by the next request)
            self._kill()
            raise
        _send_to(proc, {"op": "go", "next": expected})
        return expected

    def check(self, lane: str, region: Any, config: Config, budget: float, *,
              ceiling: float | None = None, warmup: int = 3, repeats: int = 15,
              seeds: Sequence[int] | None = None, meanwhile: Meanwhile = None,
              send_next: bool = False) -> Outcome:
        """Build, verify (on `seeds`, else fresh ones), then time; failures are Outcomes.

        `meanwhile` is parent work (the previous trial's database writes) run while the child
        builds and verifies; the child starts timing only after it returns. It may return the
        candidate (lane, config) of this region expected next: the child builds that one
        while it compares this one's output and sends its result. With `send_next`, that
        candidate's check (the same but for lane and config) is sent too, after the go: the
        child takes it up the moment it has replied, and a `check` of it only sends its go.
        Anything else asked of the worker first calls it off (`call_off`). Its `wall_s` counts
        from the moment it was taken up.
        """
        self._asked([lane])
        req = {"op": "check", "lane": lane, "region": region, "config": config,
               "budget": budget, "ceiling": ceiling or budget, "warmup": warmup,
               "repeats": repeats, "seeds": list(seeds) if seeds is not None else None}
        try:  # (`_call` sets `started`)
            out: Outcome = self._call(req, self.timeout, meanwhile, send_next)
        except _Dead as d:
            return Outcome(Measurement(d.status, log=d.log),
                           wall_s=time.perf_counter() - self.started)
        return replace(out, wall_s=time.perf_counter() - self.started)

    def interleave(self, region: Any, candidates: Sequence[tuple[str, Config]], *,
                   rounds: int = 5, repeats: int = 10, warmup: int = 3,
                   seeds: Sequence[int] | None = None) -> Interleaved:
        """Time finalists round-robin on `seeds`' inputs (the sweep's, whose copies the child
        keeps), else on fresh ones; a string is a failure."""
        self._asked(lane for lane, _ in candidates)
        req = {"op": "interleave", "region": region, "candidates": list(candidates),
               "rounds": rounds, "repeats": repeats, "warmup": warmup,
               "seeds": list(seeds) if seeds is not None else None}
        try:
            return self._call(req, self.timeout * max(1, len(candidates)))
        except _Dead as d:
            return Interleaved([f"{d.status.value}: {d.log}"] * len(candidates))


# A worker kept between the sweeps of one process (a notebook tuning region after region),
# with how it was started: the interpreter, directory, environment and CPU set it inherited.
_SPARE: list[tuple[tuple[Any, ...], Worker]] = []
_SPARE_LOCK = threading.Lock()


def _started_as() -> tuple[Any, ...]:
    env = tuple(sorted((k, v) for k, v in os.environ.items() if not k.startswith(SETTINGS_PREFIX)))
    cpus = tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()
    return os.getpid(), sys.executable, os.getcwd(), env, cpus


def _close_spare() -> None:
    with _SPARE_LOCK:
        spares = _SPARE[:]
        _SPARE.clear()
    for _, w in spares:
        w.close()


def _kill_group(pid: int) -> None:
    """Kill the worker's process group: the worker, if it still runs, and what its kernels
    started (the compilers lead groups of their own: `kill_tools_of`)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _ended(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for a child told to end, by its reply pipe's end of file: `Popen.wait` with a
    timeout polls, with sleeps that grow to 50 ms (its exit came 10-50 ms before it saw)."""
    deadline = time.monotonic() + timeout
    if proc.stdout is not None:
        fd = proc.stdout.fileno()
        while (left := deadline - time.monotonic()) > 0 and select.select([fd], [], [], left)[0]:
            if not os.read(fd, 1 << 20):  # (a reply nobody reads any more, else its end)
                break
    _reaped(proc, deadline)


def _exited(proc: subprocess.Popen[bytes]) -> bool | None:
    """Has the worker exited? Left unreaped, so its pid, hence its group's id, stays its own.
    None where that cannot be asked: no `os.waitid` (macOS before Python 3.13), or not a
    child of ours any more."""
    if not hasattr(os, "waitid"):
        return None
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:
        return None


def _running(proc: subprocess.Popen[bytes]) -> bool:
    """`proc.poll() is None`, but a worker found ended is reaped by `_reaped` (what its
    kernels left goes first)."""
    if proc.returncode is not None:
        return False
    exited = _exited(proc)
    if exited is None:
        return proc.poll() is None
    if exited:
        _reaped(proc)
    return not exited


def _reaped(proc: subprocess.Popen[bytes], deadline: float = math.inf) -> int:
    """Wait for the worker's exit, kill what its kernels left in its group, then reap it.
    Raises `TimeoutExpired` after `deadline` (monotonic). (Where `_exited` cannot tell, it is
    only reaped.)"""
    while proc.returncode is None:
        exited = _exited(proc)
        if exited is None:
            remaining = deadline - time.monotonic()
            return proc.wait(None if math.isinf(remaining) else max(0.0, remaining))
        if exited:
            _kill_group(proc.pid)
            break
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(proc.args, 0.0)
        time.sleep(0.0005)
    return proc.wait()


@contextlib.contextmanager
def lease(timeout: float) -> Iterator[Worker]:
    """A worker for one sweep: the one a previous sweep of this process left idle, if it was
    started the same way (its start-up, ~0.1-0.3 s, is paid once), else a new one, started
    now. Kept afterwards while `reusable`, else closed."""
    timeout = checked_timeout(timeout)
    key = _started_as()
    with _SPARE_LOCK:
        spare = _SPARE.pop() if _SPARE else None
    if spare is not None and (spare[0] != key or not spare[1].reusable()):
        spare[1].close()
        spare = None
    worker = spare[1] if spare is not None else Worker(timeout)
    worker.timeout = timeout
    if spare is None:
        worker.start()
    try:
        yield worker
        worker.call_off()
    finally:
        keep = worker.reusable()
        if keep:
            worker.idle()
            keep = worker.reusable()
        with _SPARE_LOCK:
            keep = keep and not _SPARE
            if keep:
                _SPARE.append((key, worker))
        if not keep:
            worker.close()


atexit.register(_close_spare)
