"""Test-only lanes that are right, and fail only for what the environment does to them: a
timeout too small for them, a full disk when they build, a kill by someone else. Registered
through ARBITER_EXTRA_LANES (`extra_lanes`), as `tests.fake_lanes` are; each reads what the
environment does from a file a test makes or removes, so one test can change it between runs.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import time

from tests.fake_lanes import FakeLane, Tiny

__all__ = ["extra_lanes"]


class Sleepy(FakeLane):
    """Right, and the fastest by its clock, but each checked run takes $FAKE_SLEEP seconds
    (default 1): a small --timeout kills it."""

    name = "fake_sleepy"

    def latency(self, config):
        return 1e-6

    def fill(self, region, a, out, config):
        time.sleep(float(os.environ.get("FAKE_SLEEP", "1")))
        super().fill(region, a, out, config)


class DiskFull(FakeLane):
    """Right and fast, but while the file $FAKE_DISK_FULL exists its build meets a full disk
    (the OSError a build's first write raises there)."""

    name = "fake_disk_full"

    def latency(self, config):
        return 1e-6

    def build(self, source):
        marker = os.environ.get("FAKE_DISK_FULL")
        if marker and os.path.exists(marker):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/cache/ab/abcdef.so")
        return super().build(source)


class Blocked(FakeLane):
    """Right and fast, but while the file $FAKE_BLOCK exists its run waits (its worker's pid
    written to $FAKE_BLOCK.pid): the test kills that worker from outside."""

    name = "fake_blocked"

    def latency(self, config):
        return 1e-6

    def fill(self, region, a, out, config):
        marker = os.environ.get("FAKE_BLOCK")
        if marker and os.path.exists(marker):
            with open(f"{marker}.part", "w") as f:
                f.write(str(os.getpid()))
            os.replace(f"{marker}.part", f"{marker}.pid")
        while marker and os.path.exists(marker):
            time.sleep(0.02)
        super().fill(region, a, out, config)


class Slowish(Tiny):
    """`Tiny` (its known best: block=4, unroll=2, fast=False) whose every checked run takes
    $FAKE_SLEEP seconds (default 0.02): long enough to be killed in the middle of."""

    name = "fake_slowish"

    def fill(self, region, a, out, config):
        time.sleep(float(os.environ.get("FAKE_SLEEP", "0.02")))
        super().fill(region, a, out, config)


class Cached(Slowish):
    """`Slowish` built through the real build cache: each config an artifact of
    $FAKE_ARTIFACT_KB KiB (default 64) written there, as a compiler's library would be (a
    full cache disk fails it as it fails them)."""

    name = "fake_cached"

    def build(self, source):
        from arbiter.lane import build_key, cached_build

        size = int(os.environ.get("FAKE_ARTIFACT_KB", "64")) << 10
        key = build_key(source=source.text + source.config.key, compiler="", flags=(),
                        arch="", lane=self.name)

        def write(tmp, target):
            target.write_bytes(os.urandom(size))
            return 0, ""

        path, seconds, cached, log = cached_build(key, ".bin", write)
        return dataclasses.replace(super().build(source), path=str(path),
                                   compile_seconds=seconds, cached=cached, log=log)


sleepy, disk_full, blocked, slowish, cached = (Sleepy(), DiskFull(), Blocked(), Slowish(),
                                               Cached())
LANES = {lane.name: attr for attr, lane in (("sleepy", sleepy), ("disk_full", disk_full),
                                            ("blocked", blocked), ("slowish", slowish),
                                            ("cached", cached))}


def extra_lanes(*names: str) -> str:
    """The ARBITER_EXTRA_LANES entries registering the named lanes (all when none named)."""
    return ",".join(f"{n}=tests.faulty_lanes:{LANES[n]}" for n in (names or tuple(LANES)))
