"""Test-only lanes, one per way a candidate can fail, plus a small tunable space with known
latencies. Registered without entry points through ARBITER_EXTRA_LANES (see `extra_lanes`),
which worker processes inherit; `pythonpath()` makes `tests.fake_lanes` importable there.
"""

from __future__ import annotations

import ctypes
import math
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from arbiter.lanes.vendor_numpy.run import compute

from arbiter.lane import (
    Artifact,
    Availability,
    BuildError,
    Config,
    EmitError,
    KernelSource,
    Platform,
    Region,
    Rule,
    Space,
    Tunable,
    run_tool,
    validate_inputs,
    validate_output,
)

ROOT = str(Path(__file__).resolve().parent.parent)


class _Runner:
    timing_method = "fake_clock"

    def __init__(self, lane: FakeLane, region: Region, config: Config) -> None:
        self.lane, self.region, self.config = lane, region, config

    def run(self, inputs: Mapping[str, np.ndarray], out: np.ndarray) -> None:
        a = validate_inputs(self.region, inputs)
        validate_output(self.region, out)
        self.lane.fill(self.region, a, out, self.config)

    def time(self, input_sets: Sequence[Mapping[str, np.ndarray]], *, warmup: int,
             repeats: int) -> list[float]:
        return self.lane.samples(self, repeats)

    def close(self) -> None:
        pass


class FakeLane:
    """Computes the right answer through numpy; subclasses break one thing."""

    name = "fake"
    platform = Platform.CPU
    precisions = ("f32",)
    version = "1"

    def available(self) -> Availability:
        return Availability(True)

    def applies_to(self, region: Region) -> str | None:
        return None

    def space(self, region: Region) -> Space:
        return Space()

    def emit(self, region: Region, config: Config) -> KernelSource:
        return KernelSource(self.name, region.key, config, "python", f"# {self.name}\n")

    def build(self, source: KernelSource) -> Artifact:
        # built now, as a compiling lane's first sweep builds every candidate
        return Artifact(self.name, f"{self.name}-{source.config.key}", source, None, 0.0, False)

    def runner(self, artifact: Artifact, region: Region) -> _Runner:
        return _Runner(self, region, artifact.source.config)

    def latency(self, config: Config) -> float:
        return 1e-3

    def samples(self, runner: _Runner, repeats: int) -> list[float]:
        base = self.latency(runner.config)
        rng = np.random.default_rng()
        return [base * (1 + 0.002 * float(rng.standard_normal())) for _ in range(repeats)]

    def fill(self, region: Region, a: Mapping[str, np.ndarray], out: np.ndarray,
             config: Config) -> None:
        np.copyto(out, compute(region, a), casting="same_kind")


class Segfault(FakeLane):
    name = "fake_segfault"

    def fill(self, region, a, out, config):
        ctypes.string_at(0)  # read address 0: SIGSEGV in this process


class Hang(FakeLane):
    name = "fake_hang"

    def fill(self, region, a, out, config):
        time.sleep(3600)


class Garbage(FakeLane):
    name = "fake_garbage"

    def fill(self, region, a, out, config):
        out[...] = np.random.default_rng().standard_normal(out.shape, dtype=np.float32)


class Untouched(FakeLane):
    name = "fake_untouched"

    def fill(self, region, a, out, config):
        pass


class NaN(FakeLane):
    name = "fake_nan"

    def fill(self, region, a, out, config):
        super().fill(region, a, out, config)
        out.flat[0] = np.nan


class BrokenBuild(FakeLane):
    name = "fake_broken_build"

    def build(self, source):
        raise BuildError("compile failed (exit 1)", "kernel.c:1:1: error: expected ';'")


class Exit(FakeLane):
    name = "fake_exit"

    def fill(self, region, a, out, config):
        os._exit(3)


class Tiny(FakeLane):
    """A small tunable space with known latencies: the best is block=4, unroll=2, fast=False.

    `fast=True` is quicker but over any budget below 1e-2 (a looser query budget picks it).
    Rule: block * unroll <= 8.
    """

    name = "fake_tiny"

    def space(self, region):
        return Space(
            (Tunable("block", (1, 2, 4, 8), 1), Tunable("unroll", (1, 2, 4), 1),
             Tunable("fast", (False, True), False)),
            (Rule("block * unroll <= 8", lambda v: v["block"] * v["unroll"] <= 8),),
        )

    def emit(self, region, config):
        if config["block"] == 8 and config["unroll"] == 1 and config["fast"]:
            raise EmitError("block=8 with fast=True is not emitted")
        return super().emit(region, config)

    def latency(self, config):
        c = config.as_dict()
        t = 1e-3 * (1 + abs(c["block"] - 4) * 0.5 + abs(c["unroll"] - 2) * 0.3)
        return t * (0.5 if c["fast"] else 1.0)

    def fill(self, region, a, out, config):
        super().fill(region, a, out, config)
        if config["fast"]:
            out *= np.float32(1.003)  # rel_error 3e-3


LANES = {cls.name: cls() for cls in (Segfault, Hang, Garbage, Untouched, NaN, BrokenBuild, Exit,
                                     Tiny)}
segfault, hang, garbage, untouched, nan, broken_build, exit_, tiny = LANES.values()


def extra_lanes(*names: str) -> str:
    """The ARBITER_EXTRA_LANES value registering the named fakes (all when none named)."""
    attrs = {lane.name: attr for attr, lane in globals().items()
             if isinstance(lane, FakeLane) and attr in _ATTRS}
    return ",".join(f"{n}=tests.fake_lanes:{attrs[n]}" for n in (names or tuple(LANES)))


_ATTRS = ("segfault", "hang", "garbage", "untouched", "nan", "broken_build", "exit_", "tiny")


def pythonpath() -> str:
    old = os.environ.get("PYTHONPATH", "")
    return ROOT + (os.pathsep + old if old else "")


class Slow(Tiny):
    """`Tiny` whose every run takes a while: long enough to kill a sweep in the middle."""

    name = "fake_slow"

    def fill(self, region, a, out, config):
        time.sleep(0.05)
        super().fill(region, a, out, config)


slow = Slow()
LANES[slow.name] = slow
_ATTRS += ("slow",)


class Device(Tiny):
    """`Tiny` presented as a GPU lane (it runs on the CPU like the others)."""

    name = "fake_device"
    platform = Platform.CUDA


device = Device()
LANES[device.name] = device
_ATTRS += ("device",)


class SlowBuild(Tiny):
    """`Tiny` whose build runs a compiler that takes 30 s (a `sleep`; FAKE_BUILD_SECONDS
    says otherwise)."""

    name = "fake_slow_build"

    def build(self, source):
        if os.environ.get("FAKE_BUILD_LOG"):  # each build started, for the tests to count
            with open(os.environ["FAKE_BUILD_LOG"], "a") as f:
                f.write(f"{source.config.key}\n")
        rc, log = run_tool(["sleep", os.environ.get("FAKE_BUILD_SECONDS", "30")])
        if rc != 0:
            raise BuildError(f"compile failed (exit {rc})", log)
        return super().build(source)


class SlowGarbage(Garbage):
    """`Garbage` whose every run takes a while: the parent's go comes before the runs end."""

    name = "fake_slow_garbage"

    def fill(self, region, a, out, config):
        time.sleep(0.1)
        super().fill(region, a, out, config)


slow_build, slow_garbage = SlowBuild(), SlowGarbage()
LANES.update({slow_build.name: slow_build, slow_garbage.name: slow_garbage})
_ATTRS += ("slow_build", "slow_garbage")


class BadClock(FakeLane):
    """Right outputs, but its `time` breaks the rules for all configs but "ok": NaN, a
    negative latency, no samples, or NaN from its third call on (an interleaved finalist's
    third round)."""

    name = "fake_bad_clock"

    def space(self, region):
        return Space((Tunable("clock", ("ok", "nan", "negative", "empty", "nan_later", "array"),
                              "ok"),))

    def samples(self, runner, repeats):
        clock = runner.config["clock"]
        calls = runner.__dict__.setdefault("calls", 0)
        runner.calls = calls + 1
        if clock == "empty":
            return []
        if clock == "array":  # (a numpy array of samples is as good as a list)
            return np.full(repeats, 2e-3)
        value = {"nan": math.nan, "negative": -1e-3}.get(clock, 1e-3)
        if clock == "nan_later":
            # the fastest for two calls (a sweep on a busy machine times a candidate twice),
            # NaN from the third (a finalist's third round)
            value = 1e-7 if calls < 2 else math.nan
        return [value] * repeats


bad_clock = BadClock()
LANES[bad_clock.name] = bad_clock
_ATTRS += ("bad_clock",)


class SpawnThenHang(FakeLane):
    """A kernel that starts a process of its own (its pid appended to $FAKE_SPAWN_LOG), then
    hangs; `SpawnThenCrash` dies instead."""

    name = "fake_spawn_hang"

    def fill(self, region, a, out, config):
        import subprocess

        p = subprocess.Popen(["sleep", "600"])
        with open(os.environ["FAKE_SPAWN_LOG"], "a") as f:
            f.write(f"{p.pid}\n")
        self.after_spawn()

    def after_spawn(self):
        time.sleep(3600)


class SpawnThenCrash(SpawnThenHang):
    name = "fake_spawn_crash"

    def after_spawn(self):
        os._exit(3)


spawn_hang, spawn_crash = SpawnThenHang(), SpawnThenCrash()
LANES.update({spawn_hang.name: spawn_hang, spawn_crash.name: spawn_crash})
_ATTRS += ("spawn_hang", "spawn_crash")


class Adversary(FakeLane):
    """Known true latencies under adversarial timing noise that only adds time, all within
    the budget: `fast` is the true fastest (1.00 ms, 3e-4 error) with rare 20x outliers;
    `noisy` is slow (1.6 ms) and very noisy, `bimodal` is near (1.08 ms) and half its calls
    take 2.5x, and `steady` is 1.15 ms; those three are exact. An error tie-break or a median
    fooled by the outliers would pick one of them."""

    name = "fake_adversary"
    TRUE = {"fast": 1.00e-3, "noisy": 1.6e-3, "bimodal": 1.08e-3, "steady": 1.15e-3}

    def space(self, region):
        return Space((Tunable("kind", tuple(self.TRUE), "steady"),))

    def samples(self, runner, repeats):
        kind = runner.config["kind"]
        rng = np.random.default_rng()
        base = self.TRUE[kind]
        jitter = base * (1 + 0.003 * np.abs(rng.standard_normal(repeats)))
        if kind == "fast":
            return np.where(rng.random(repeats) < 0.05, 20 * base, jitter).tolist()
        if kind == "noisy":
            return (jitter * (1 + rng.exponential(1.0, repeats))).tolist()
        if kind == "bimodal":
            return np.where(rng.random(repeats) < 0.5, 2.5 * base, jitter).tolist()
        return jitter.tolist()

    def fill(self, region, a, out, config):
        super().fill(region, a, out, config)
        if config["kind"] == "fast":
            out *= np.float32(1.0003)


adversary = Adversary()
LANES[adversary.name] = adversary
_ATTRS += ("adversary",)


class Wobbly(FakeLane):
    """Right outputs, but its rounds of calls take 1 ms and 3 ms by turns, however often it
    is timed: an unstable timing that stays so."""

    name = "fake_wobbly"

    def samples(self, runner, repeats):
        turn = runner.__dict__.setdefault("turn", 0)
        out = []
        for i in range(repeats):
            out.append(1e-3 if (turn + i // 3) % 2 == 0 else 3e-3)
        runner.turn = turn + max(1, repeats // 3)
        return out


wobbly = Wobbly()
LANES[wobbly.name] = wobbly
_ATTRS += ("wobbly",)


class FlakyInRounds(Tiny):
    """`Tiny` (and the fastest of it) whose kernel dies when timed in short turns, as the
    finalists' interleaved rounds time it: a crash the sweep never saw."""

    name = "fake_flaky_rounds"

    def samples(self, runner, repeats):
        if repeats <= 3 and runner.config["block"] == 4:
            os._exit(7)
        return super().samples(runner, repeats)


flaky_rounds = FlakyInRounds()
LANES[flaky_rounds.name] = flaky_rounds
_ATTRS += ("flaky_rounds",)


class BrokenSpace(Tiny):
    """`Tiny` whose space cannot be built: a lane bug in the sweeping process itself, outside
    the isolated worker (a worker must fail that region once, not die on it)."""

    name = "fake_broken_space"

    def space(self, region):
        raise RuntimeError("space exploded")


broken_space = BrokenSpace()
LANES[broken_space.name] = broken_space
_ATTRS += ("broken_space",)


def _zero(arrays) -> None:
    """Write zeros into `arrays` as native code would: through their memory, whatever numpy's
    read-only flag says."""
    for a in arrays.values():
        ctypes.memset(a.ctypes.data, 0, a.nbytes)


class Clobber(FakeLane):
    """The right output, then its inputs zeroed (a buggy in-place kernel, an out-of-bounds
    store): the fastest by its clock, and it must never win."""

    name = "fake_clobber"

    def latency(self, config):
        return 1e-6

    def fill(self, region, a, out, config):
        super().fill(region, a, out, config)
        _zero(a)


class _ClobberingRunner(_Runner):
    def time(self, input_sets, *, warmup, repeats):
        for s in input_sets:
            _zero(s)
        return super().time(input_sets, warmup=warmup, repeats=repeats)


class ClobberWhileTimed(Clobber):
    """Right outputs, untouched inputs when checked; zeroes its inputs only when timed."""

    name = "fake_clobber_timed"

    def fill(self, region, a, out, config):
        FakeLane.fill(self, region, a, out, config)

    def runner(self, artifact, region):
        return _ClobberingRunner(self, region, artifact.source.config)


clobber, clobber_timed = Clobber(), ClobberWhileTimed()
LANES.update({clobber.name: clobber, clobber_timed.name: clobber_timed})
_ATTRS += ("clobber", "clobber_timed")


class Hog(FakeLane):
    """The right output, after taking $FAKE_HOG_BYTES (default 1 GiB) of memory, 64 MiB at a
    time, and holding it for $FAKE_HOG_SECONDS (default 30 s)."""

    name = "fake_hog"

    def fill(self, region, a, out, config):
        held, step = [], 64 << 20
        for _ in range(int(os.environ.get("FAKE_HOG_BYTES", 1 << 30)) // step):
            held.append(np.ones(step, np.uint8))
            time.sleep(0.01)
        time.sleep(float(os.environ.get("FAKE_HOG_SECONDS", 30)))
        super().fill(region, a, out, config)


class Reserve(FakeLane):
    """The right output, from a process that reserved 8 GiB of address space (read-write,
    never touched), as a GPU runtime reserves its own."""

    name = "fake_reserve"
    reserved: list[int] = []

    def fill(self, region, a, out, config):
        if not self.reserved:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_long]
            # PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE
            p = libc.mmap(None, 8 << 30, 0x1 | 0x2, 0x02 | 0x20 | 0x4000, -1, 0)
            assert p not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
            self.reserved.append(p)
        super().fill(region, a, out, config)


class Sleepy(FakeLane):
    """The right output, each run $FAKE_SLEEP seconds late."""

    name = "fake_sleepy"

    def fill(self, region, a, out, config):
        time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
        super().fill(region, a, out, config)


class SleepyWrong(Sleepy):
    """`Sleepy` whose output is twice the right one: judged wrong as soon as it is checked,
    never timed."""

    name = "fake_sleepy_wrong"

    def fill(self, region, a, out, config):
        super().fill(region, a, out, config)
        out *= np.float32(2.0)


hog, reserve, sleepy, sleepy_wrong = Hog(), Reserve(), Sleepy(), SleepyWrong()
LANES.update({x.name: x for x in (hog, reserve, sleepy, sleepy_wrong)})
_ATTRS += ("hog", "reserve", "sleepy", "sleepy_wrong")


class Unloadable(FakeLane):
    """Builds, then its runner cannot load what was built (a library with an undefined
    symbol, a device gone): RuntimeError, as ctypes and GPU runtimes raise it."""

    name = "fake_unloadable"

    def runner(self, artifact, region):
        raise RuntimeError("libfake.so: undefined symbol: fake_kernel")


unloadable = Unloadable()
LANES[unloadable.name] = unloadable
_ATTRS += ("unloadable",)
