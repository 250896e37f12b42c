"""The lane contract: what every candidate implementation must offer the arbiter; and a
candidate's build through it (no numpy here: the worker's first compile starts before numpy
is imported)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._errors import BuildError, EmitError
from ._region import Region
from ._values import (
    Artifact,
    Availability,
    Config,
    KernelSource,
    Measurement,
    Platform,
    Space,
    Status,
)

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Lane", "Runner", "build_candidate"]


@runtime_checkable
class Runner(Protocol):
    """A loaded artifact, ready to launch.

    `run` and `time` validate every array against the region before touching native code
    (`arbiter.validate_inputs`), raising `InputError` on a mismatch. Native failures are
    raised as `RuntimeError` with the runtime's message; the trial worker turns them into
    `Status.LAUNCH_FAILED`.
    """

    timing_method: str  # e.g. "monotonic_ns", "cuda_events"

    def run(self, inputs: Mapping[str, np.ndarray], out: np.ndarray) -> None:
        """Compute the region once into `out` (float32, C-contiguous, region's output shape).

        Precondition: `out` may hold anything (the checker poisons it); every element must
        be overwritten. GPU runners copy inputs in and the result back.
        """

    def time(
        self, input_sets: Sequence[Mapping[str, np.ndarray]], *, warmup: int, repeats: int
    ) -> list[float]:
        """Seconds per call, one sample per repeat, after `warmup` untimed calls.

        Inputs are placed once (on the device for GPU lanes) and rotated through
        `input_sets` so repeated calls do not measure a warm cache.
        """

    def close(self) -> None:
        """Free native resources; the runner is unusable afterwards."""


@runtime_checkable
class Lane(Protocol):
    """One candidate implementation family. Lanes are stateless; all state is in values.

    `applies_to` and `space` are pure functions of the region. `emit` raises `EmitError`
    for a request it cannot honour, `build` raises `BuildError` with the compiler log, and
    neither is ever called with a config that `space(region).violation` rejects.
    """

    name: str
    platform: Platform
    precisions: tuple[str, ...]
    version: str  # part of every build key: bump it when generated code changes meaning

    def available(self) -> Availability:
        """Compiler / device / library present? With the reason when not."""

    def applies_to(self, region: Region) -> str | None:
        """None when this lane can compute `region`, else why not."""

    def space(self, region: Region) -> Space:
        """The tunables worth searching for this region, with their constraints."""

    def emit(self, region: Region, config: Config) -> KernelSource:
        """Generated source for (region, config)."""

    def build(self, source: KernelSource) -> Artifact:
        """Compile (through the content-hash cache) into a loadable artifact."""

    def runner(self, artifact: Artifact, region: Region) -> Runner:
        """Load the artifact for launching on `region`'s arrays."""


# (lane, its version, region, config key, settings) -> the artifact built for it in this
# process: lanes are stateless, so the same candidate emits the same source, and a build
# cache hit needs only its file. Emitting and hashing again took 0.4-0.7 ms a check.
_BUILT: OrderedDict[tuple[Any, ...], Artifact] = OrderedDict()
_BUILT_LOCK = threading.Lock()  # the worker's background builds use it too
BUILT_KEPT = 1024


def build_candidate(lane: Lane, region: Region, config: Config) -> Artifact | Measurement:
    """Emit and build; a Measurement (INVALID / COMPILE_FAILED) when that fails."""
    from ._settings import settings

    key = (lane.name, lane.version, region, config.key, settings())
    with _BUILT_LOCK:
        known = _BUILT.get(key)
        if known is not None:
            _BUILT.move_to_end(key)
    if known is not None and (known.path is None or os.path.exists(known.path)):
        return replace(known, compile_seconds=0.0, cached=True, log="")
    built = _build_candidate(lane, region, config)
    if isinstance(built, Artifact):
        with _BUILT_LOCK:
            _BUILT[key] = built
            while len(_BUILT) > BUILT_KEPT:
                _BUILT.popitem(last=False)
    return built


def _build_candidate(lane: Lane, region: Region, config: Config) -> Artifact | Measurement:
    violation = lane.space(region).violation(config)
    if violation is not None:
        return Measurement(Status.INVALID, log=f"config rejected by the lane's space: {violation}")
    try:
        source = lane.emit(region, config)
    except EmitError as e:
        return Measurement(Status.INVALID, log=f"emit refused: {e}")
    try:
        return lane.build(source)
    except BuildError as e:
        return Measurement(Status.COMPILE_FAILED, log=f"{e}\n{e.log}")
