"""The trial worker process (`python -m arbiter._worker_child`): it builds, checks and times
candidates for the parent (`_worker.Worker`), one request at a time.

Requests come pickled on its stdin; replies go pickled to a private pipe (its own stdout is
pointed at stderr, so a chatty lane cannot corrupt the protocol). Timing waits for the
parent's "go", sent once its own work for the previous trial is done. The go may name the
candidate the parent expects next: for a CPU lane, this process then times the current
candidate before comparing its outputs, and compiles the next one in a thread while it
compares and replies (`_Ahead`). Before its own start-up, the parent may also name the sweep's
lane defaults (a hint: `Worker.build_early`), and each region's search its own: they compile,
one after another, until a request comes; one in the region of the compile under way waits
for it, any other stops it. A build not wanted after all is stopped, compiler included, before
anything else runs; none outlives this process. The first hint may also name the first region
and its seeds: their inputs and references are then made too, while the parent starts up. At
a sweep's end this process is told (no reply awaited) to drop what the sweep left in it.

A check sent ahead is taken up the moment the reply before it is sent. Its own go may call it
off (a result that changed the sampler's mind): the check then stops at its next check-in. One
that would compile waits for its go before anything else, its compile (a CPU lane's) under way
in the background meanwhile, so that a call-off stops the compiler too.

The parent's side (`_worker`) imports from here what both sides share: the messages' framing
(`HEADER`, `send`), the reply types, the settings every request carries (`settings_now`) and
`cpu_lane`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import pickle
import queue
import select
import struct
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ._settings import encoded_environ, settings
from ._values import Config, Measurement, Status

__all__ = ["HEADER", "SETTINGS_PREFIX", "Interleaved", "Outcome", "cpu_lane", "send",
           "settings_now"]

HEADER = struct.Struct("<Q")  # each message: its pickle's length, then the pickle
SETTINGS_PREFIX = "ARBITER_"  # the variables every request carries (`settings_now`)


@dataclass(frozen=True)
class Outcome:
    """One request's result plus where the child spent its time (seconds)."""

    measurement: Measurement
    build_s: float = 0.0  # inside lane.build (cache lookups included)
    timing_s: float = 0.0  # inside runner.time (warm-up and repeats)
    verify_s: float = 0.0  # inside runner.run (the verification runs on the oracle's inputs)
    gate_s: float = 0.0  # waiting, before timing, for the parent to finish its own work
    work_s: float = 0.0  # the whole request in the child
    wall_s: float = 0.0  # the whole request seen by the parent
    built_ahead_s: float = 0.0  # its build in the background, before a request waited for it


@dataclass(frozen=True)
class Interleaved:
    """Finalists' samples, one list per candidate (a string: its failure), plus the child's
    time inside their runners' `time` (warm-ups and repeats: kernel time, as a check's
    `timing_s`)."""

    samples: list[list[float] | str]
    timing_s: float = 0.0


@contextlib.contextmanager
def _counted(clock: dict[str, float], key: str) -> Iterator[None]:
    """Add the wall time of the block to `clock[key]`."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        clock[key] += time.perf_counter() - t0


class _Timed:
    """A lane whose `build` and whose runners' `time` add their wall time to counters."""

    def __init__(self, lane: Any, clock: dict[str, float]) -> None:
        self._lane, self._clock = lane, clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lane, name)

    def build(self, source: Any) -> Any:
        with _counted(self._clock, "build"):
            return self._lane.build(source)

    def runner(self, artifact: Any, region: Any) -> Any:
        return _TimedRunner(self._lane.runner(artifact, region), self._clock)


class _TimedRunner:
    def __init__(self, runner: Any, clock: dict[str, float]) -> None:
        self._runner, self._clock = runner, clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def time(self, input_sets: Any, *, warmup: int, repeats: int) -> list[float]:
        with _counted(self._clock, "timing"):
            return self._runner.time(input_sets, warmup=warmup, repeats=repeats)

    def run(self, inputs: Any, out: Any) -> None:
        with _counted(self._clock, "verify"):
            self._runner.run(inputs, out)


# (region, lane, config key): one candidate of one region
_Key = tuple[Any, str, str]


class _Builder:
    """The one thread the background builds run on, one batch after another. Started once:
    a thread started per batch took ~0.5 ms on 2 busy cores to run its first line, each
    time after a timing, with no compiler running. A batch handed over is taken up before
    the hand-over returns, as a new thread's first lines run before its start returns: the
    compiler starts before the caller's own work (a comparison, an import) holds the GIL."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Ahead] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="arbiter-build", daemon=True)
        self.thread.start()

    def hand_over(self, job: _Ahead) -> None:
        self.jobs.put(job)
        job.started.wait()

    def _serve(self) -> None:
        while True:
            job = self.jobs.get()
            job.started.set()
            try:
                job.run()
            except Exception:  # noqa: BLE001, S110  a request for its candidate builds again
                pass
            finally:
                job.done.set()


_BUILDER: list[_Builder] = []


class _Ahead:
    """Candidates built on the builder's thread before their requests come: the one the
    parent expects next (built once the current one is timed, while it is compared and its
    result goes back), or, `early`, lane defaults named by the parent (the sweep's, before
    its own start-up; each region's, as its search starts), built one after another until a
    request comes."""

    def __init__(self, candidates: list[tuple[Any, str, Config]], early: bool = False) -> None:
        self.early = early
        self.names = [(region, lane, config.key) for region, lane, config in candidates]
        # (region, lane, config key) -> (build, start, end); only builds that ran to their end
        self.built: dict[_Key, tuple[Any, float, float]] = {}
        self.lock = threading.Lock()
        self.stopped = False  # killed: not wanted after all
        # the region of the request that came (None: a request for none): no other build
        # starts, but for the first compile of early builds in that region
        self.asked: list[Any] = []
        self.compiled = False  # a compiler ran (a build that was no cache hit)
        self.under_way: _Key | None = None
        self.candidates = candidates
        self.started, self.done = threading.Event(), threading.Event()
        if not _BUILDER:
            _BUILDER.append(_Builder())
        _BUILDER[0].hand_over(self)

    def run(self) -> None:
        """Build the candidates in order, on the builder's thread."""
        from ._lane import build_candidate
        from ._registry import get_lane

        for region, lane, config in self.candidates:
            key = (region, lane, config.key)
            with self.lock:
                if self.stopped or (self.asked and not self._first_compile_for(region)):
                    return
                self.under_way = key
            start = time.perf_counter()
            try:
                built = build_candidate(get_lane(lane), region, config)
            except Exception:  # noqa: BLE001  the request for it builds again and reports
                built = None
            with self.lock:
                self.under_way = None
                if self.stopped:  # its compiler was killed: not a build
                    return
                self.built[key] = (built, start, time.perf_counter())
                self.compiled = self.compiled or not getattr(built, "cached", False)

    def _first_compile_for(self, region: Any) -> bool:
        # A region's first request often comes before its early builds began (they start in
        # a thread, and a lane without a compiler may come first): its references are then
        # made while that region's first compile runs, not before it
        return self.early and not self.compiled and self.asked[0] == region

    def waits_for(self, lane: str | None, region: Any, config: Config | None) -> bool:
        """A request came: no other build starts. Must the one for (lane, region, config)
        wait for the build under way (else it is dropped, compiler killed: none may run
        while a candidate is checked or timed)? For the candidate expected next, only its
        own request waits; for early builds, a request in the region of the one under way
        (or when none is: the region's first compile may start still)."""
        with self.lock:
            if not self.asked:
                self.asked.append(region if lane is not None and config is not None else None)
            under = self.under_way
        if lane is None or config is None:
            return False
        if self.early:
            return under is None or under[0] == region
        return (region, lane, config.key) in self.names

    def drop(self) -> None:
        """Not wanted after all: its compiler is killed (it must not run while another
        candidate is timed); builds it finished before are kept."""
        from ._build import forget_stopped, stop_tools

        ident = _BUILDER[0].thread.ident  # (its batch's thread: the builder's)
        assert ident is not None
        with self.lock:
            self.stopped = True
        stop_tools(ident)
        self.done.wait()
        forget_stopped(ident)


_AHEAD: list[_Ahead] = []
# builds made in the background and done, for their own requests:
# key -> (build, the seconds of its compile before any request waited for it)
_READY: dict[_Key, tuple[Any, float]] = {}


def _take_ahead(lane: str | None = None, region: Any = None,
                config: Config | None = None) -> tuple[Any, float, float]:
    """The build of (lane, region, config) made in the background, once no background build
    runs: (the build or None, the seconds of its compile done before a request waited for
    it, the seconds this request waited). A build under way that this request does not wait
    for is dropped; finished ones wait in `_READY` for their own requests. What a build ran
    after a request began to wait is that request's build time (each compile counted once)."""
    ahead = _AHEAD.pop() if _AHEAD else None
    waited = 0.0
    if ahead is not None:
        t0 = time.perf_counter()
        if ahead.waits_for(lane, region, config):
            ahead.done.wait()
            waited = time.perf_counter() - t0
        else:
            ahead.drop()
        for key, (built, start, end) in ahead.built.items():
            _READY[key] = (built, max(0.0, min(end, t0) - start))
    if lane is None or config is None:
        return None, 0.0, waited
    built, ahead_s = _READY.pop((region, lane, config.key), (None, 0.0))
    return built, ahead_s, waited


def _build_early(req: dict[str, Any]) -> None:
    """The parent's hint: build these lane defaults now (CPU lanes only; those built early
    before are kept)."""
    _take_ahead()
    cpu = [(region, lane, config) for region, lane, config in req["candidates"]
           if cpu_lane(lane) and (region, lane, config.key) not in _READY]
    if cpu:
        _AHEAD.append(_Ahead(cpu, early=True))


IDLE_BEFORE_COLLECT_S = 0.2  # a request this soon after a sweep's end skips the collection


class _CalledOff(Exception):
    """The parent called off a check it had sent ahead (its go said so)."""


class _Go:
    """A check request's gate (`_check.Gate`): the parent's "go" message, which may name the
    candidate it expects next, or call this one off (one sent ahead that it no longer
    wants)."""

    def __init__(self, region: Any) -> None:
        self.region, self.pending = region, True
        self.next: tuple[str, Config] | None = None
        self.clock = 0.0
        self.compiled = True  # this candidate's build was no cache hit (unknown: it failed)

    def early(self, built: Any) -> bool:
        # a sweep whose candidates compile: the next one most likely does too. Whatever the
        # output's size: the next one's request, sent ahead, would start its compile ~2 ms
        # after this timing (the reply, its take-up and lookup), with no compiler running
        self.compiled = not built.cached
        if self.compiled:
            self.check_in()
        return not self.pending and self._builds_next()

    def check_in(self) -> None:
        if self.pending and select.select([0], [], [], 0)[0]:
            self.wait()  # it has come: reading it does not wait

    def _builds_next(self) -> bool:
        return self.compiled and self.next is not None and cpu_lane(self.next[0])

    def wait(self) -> None:
        if not self.pending:
            return
        t0 = time.perf_counter()
        self.pending = False
        go = _receive()
        if go is None:
            raise SystemExit(0)  # parent gone
        self.next = go.get("next")
        self.clock += time.perf_counter() - t0
        if go.get("off"):
            raise _CalledOff

    def timed(self) -> None:
        if self.next is None or not self._builds_next():
            return
        # (called again once the reply is ready: by then it is under way)
        _build_behind(self.region, *self.next)


def cpu_lane(name: str) -> bool:
    """Is `name` a CPU lane (False when it cannot say)? Only a CPU lane's build runs in the
    background, and only a worker that ran CPU lanes alone is kept idle between sweeps: a GPU
    lane may open a device context. Asked several times a check, on its path: answered once
    per lane and lane setting (a registry lookup, ~5 us on a quiet core, several times that
    on 2 busy ones)."""
    return _cpu_lane_under(name, settings().extra_lanes)


@functools.lru_cache(maxsize=64)
def _cpu_lane_under(name: str, extra_lanes: str) -> bool:
    from ._registry import get_lane
    from ._values import Platform

    try:
        return get_lane(name).platform is Platform.CPU
    except Exception:  # noqa: BLE001  the request for it will say what is wrong
        return False


def _built_already(lane: Any, region: Any, config: Config) -> tuple[bool, Any]:
    """Is the candidate built (in the background, or in the build cache), and its build
    (None: the background's, for `_take_ahead`)? Looked up: nothing is compiled, and the emit
    and hash count as the request's build time."""
    from ._build import lookup_only
    from ._lane import build_candidate

    key = (region, lane.name, config.key)
    if key in _READY:
        return True, None
    if _AHEAD and not _AHEAD[0].early and key in _AHEAD[0].names:
        return False, None  # the one expected next, built in the background: no lookup
    try:
        with lookup_only():
            return True, build_candidate(lane, region, config)
    except Exception:  # noqa: BLE001  `NotBuilt`; anything else, the check itself reports
        return False, None


def _build_behind(region: Any, lane: str, config: Config) -> None:
    """Build this candidate in the background: a CPU lane's, unless it is built or under
    way. Any other build under way is stopped."""
    key = (region, lane, config.key)
    if cpu_lane(lane) and key not in _READY and not (_AHEAD and key in _AHEAD[0].names):
        _take_ahead()
        _AHEAD.append(_Ahead([(region, lane, config)]))


def _cases_beside_build(req: dict[str, Any]) -> list[int]:
    """The request's seeds (fresh ones when it names none). When it is to wait for a build
    in the background (mostly its region's defaults, named as its search starts), the
    seeds' inputs and references are made first, while that compiler runs (no other build
    starts once a request came): a region's first check, the one that makes them, then
    overlaps the compile instead of following it."""
    from ._check import fresh_seeds

    seeds = list(req["seeds"]) if req.get("seeds") is not None else fresh_seeds(2)
    if _AHEAD and _AHEAD[0].waits_for(req["lane"], req["region"], req["config"]):
        _make_cases(req["region"], seeds)
    return seeds


def _make_cases(region: Any, seeds: list[int]) -> None:
    """The seeds' inputs and references, made ahead of the checks that use them."""
    from ._check import cases

    try:
        cases(region, seeds)
    except Exception:  # noqa: BLE001  not a region the oracle takes: the check says so
        pass


def _check(req: dict[str, Any]) -> Outcome:
    from ._check import check_candidate
    from ._registry import get_lane

    clock = {"build": 0.0, "timing": 0.0, "verify": 0.0}
    t0 = time.perf_counter()
    gate: _Go = req["_gate"]
    lane = _Timed(get_lane(req["lane"]), clock)
    looked_up = None
    if req.get("ahead"):
        found, looked_up = _built_already(lane, req["region"], req["config"])
        if not found:
            # sent ahead, and to be compiled: it may be called off, and only a compile in the
            # background can be stopped halfway (at the next request, as one for the
            # candidate expected next is)
            _build_behind(req["region"], req["lane"], req["config"])
            gate.wait()
    seeds = _cases_beside_build(req)
    built, ahead_s, waited = _take_ahead(req["lane"], req["region"], req["config"])
    clock["build"] += waited
    if built is None:
        built = looked_up
    budget, ceiling = req["budget"], max(req["budget"], req.get("ceiling", req["budget"]))
    m = check_candidate(lane, req["region"], req["config"], ceiling,  # type: ignore[arg-type]
                        seeds=seeds, warmup=req["warmup"], repeats=req["repeats"],
                        gate=gate, built=built)
    if m.status is Status.OK and m.rel_error is not None and m.rel_error > budget:
        # timed because it is inside the ceiling (a looser budget may want it later), but it
        # fails this sweep's budget
        m = Measurement(Status.WRONG_RESULT, m.rel_error, m.max_abs, m.samples, m.timing_method,
                        m.compile_seconds, m.log + f"\nover budget {budget:g}")
    return Outcome(m, clock["build"], clock["timing"], clock["verify"], gate.clock,
                   time.perf_counter() - t0, built_ahead_s=ahead_s)


def _interleave(req: dict[str, Any]) -> Interleaved:
    """Time finalists round-robin (A B C A B C ...) on shared inputs; a string is a failure."""
    from ._check import fresh_seeds, timing_samples, timing_sets
    from ._lane import build_candidate
    from ._registry import get_lane

    region = req["region"]
    sets = timing_sets(region, req.get("seeds") or fresh_seeds(2))
    clock = {"build": 0.0, "timing": 0.0, "verify": 0.0}
    runners: list[Any] = []
    for lane_name, config in req["candidates"]:
        lane = _Timed(get_lane(lane_name), clock)
        built = build_candidate(lane, region, config)
        runners.append(built.log if isinstance(built, Measurement) else lane.runner(built, region))
    samples: list[list[float] | str] = [r if isinstance(r, str) else [] for r in runners]
    try:
        for rnd in range(req["rounds"]):
            for i, r in enumerate(runners):
                if isinstance(r, str) or isinstance(samples[i], str):
                    continue
                try:
                    got = r.time(sets, warmup=req["warmup"] if rnd == 0 else 1,
                                 repeats=req["repeats"])
                except RuntimeError as e:
                    samples[i] = f"launch failed: {e}"
                    continue
                timed = timing_samples(got)
                samples[i] = (f"launch failed: {timed}" if isinstance(timed, str)
                              else [*samples[i], *timed])
    finally:
        for r in runners:
            if not isinstance(r, str):
                r.close()
    return Interleaved(samples, clock["timing"])


def _forget() -> None:
    """Drop the inputs and references of the sweep just done (a large region's take GBs):
    a worker kept idle for the next sweep holds only itself. Its garbage collection (10-20
    ms) waits for the worker to be idle: a sweep that follows at once (a script's next
    `tune`) had its first request wait for it; it is done at the next forget then."""
    import gc

    from ._check import forget_cases

    forget_cases()
    _READY.clear()
    if not select.select([0], [], [], IDLE_BEFORE_COLLECT_S)[0]:
        gc.collect()


_HANDLERS = {"check": _check, "interleave": _interleave}


def _read_exact(fd: int, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _receive() -> Any:
    head = _read_exact(0, HEADER.size)
    body = _read_exact(0, HEADER.unpack(head)[0]) if head is not None else None
    return pickle.loads(body) if body is not None else None


def settings_now() -> dict[str, str]:
    """The parent's ARBITER_* variables: each request carries them, so a worker kept between
    sweeps follows the settings of the sweep it serves (the cache directory, extra lanes).
    Read from the environment's encoded form where there is one: decoding the whole
    environment took 20 us a request here (40 variables), this 5."""
    data = encoded_environ()
    if data is None:
        return {k: v for k, v in os.environ.items() if k.startswith(SETTINGS_PREFIX)}
    prefix = os.fsencode(SETTINGS_PREFIX)
    return {os.fsdecode(k): os.fsdecode(v) for k, v in data.items() if k.startswith(prefix)}


_APPLIED: list[dict[str, str]] = []  # the settings the last request carried, followed


def _new_settings(env: dict[str, str] | None) -> bool:
    """Does a request carrying `env` (None: none) change the settings followed now?"""
    return env is not None and env != (_APPLIED[0] if _APPLIED else settings_now())


def _use_settings(env: dict[str, str] | None) -> None:
    if env is None or (_APPLIED and _APPLIED[0] == env):
        return
    for k in [k for k in settings_now() if k not in env]:
        del os.environ[k]
    os.environ.update(env)
    _APPLIED[:] = [dict(env)]


def _serve(hint_first: bool) -> None:
    import faulthandler

    faulthandler.enable()  # a segfault leaves the Python stack in the trial's log
    if not hint_first:
        from . import _check  # noqa: F401  (numpy and the oracle, while the parent gets ready)
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # lane prints go to the log, not into the protocol
    try:
        _serve_requests(reply_fd)
    finally:
        _take_ahead()  # its compiler must not outlive the worker


def _serve_requests(reply_fd: int) -> None:
    while (req := _receive()) is not None:
        if "lanes" in req:
            from ._registry import adopt_table

            adopt_table(req.pop("lanes"))
        env = req.pop("settings", None)
        if _new_settings(env):
            _take_ahead()  # built under other settings (another cache)
            _READY.clear()
        _use_settings(env)
        if req["op"] == "early":  # a hint: no reply
            _build_early(req)
            # numpy and the oracle, while the compile runs (not before: the parent is waiting
            # for the first result, and the first compile needs neither)
            from . import _check  # noqa: F401
            if req.get("cases") is not None:
                _make_cases(*req["cases"])
            continue
        if req["op"] == "forget":  # no reply either: the sweep that sent it has ended
            _take_ahead()  # builds it hinted and never asked for
            _forget()
            continue
        # Every check request is followed by one "go" from the parent once its own work for
        # the previous trial is done; timing waits for it, so the parent's database writes
        # overlap this candidate's build and verification, never its timing. Nothing else
        # builds in the background then either.
        gate = req["_gate"] = _Go(req.get("region") if req["op"] == "check" else None)
        if req["op"] != "check":
            _take_ahead()
        try:
            reply: Any = ("ok", _HANDLERS[req["op"]](req))
        except _CalledOff:
            reply = ("off", None)
        except Exception:  # a lane raising something unexpected is a result, not a crash
            reply = ("error", traceback.format_exc(limit=8))
        if req["op"] == "check":
            try:
                gate.wait()  # a candidate that never reached timing still takes its "go"
            except _CalledOff:
                reply = ("off", None)
            gate.timed()
        send(reply_fd, reply)
        if reply[0] == "off":
            # its compile, under way in the background, stops now, while the parent asks for
            # the next candidate (it ran on until that one's request came: ~2 ms more on its
            # path, and a compiler beside the parent's asking)
            _take_ahead()


def _die_with(parent: int) -> None:
    """SIGKILL this worker when its parent ends, however it ends (a SIGKILL, a SIGTERM to it
    alone): it leads a group of its own, and a kernel hung in it would run on (Linux)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it ended before that
        os._exit(1)


if __name__ == "__main__":
    # run the importable module's copy, so pickled replies name arbiter._worker_child, not
    # __main__
    from arbiter._worker_child import _die_with
    from arbiter._worker_child import _serve as serve

    for arg in sys.argv[1:]:
        if arg.startswith("--parent="):
            _die_with(int(arg.removeprefix("--parent=")))

    serve(hint_first="--hint-first" in sys.argv[1:])
    # the parent waits for this exit: frozen, the objects are not walked on the way out (60
    # ms of a sweep's end on 2 cores); nothing here needs a collection to close
    gc.freeze()
