"""The lane contract: what every candidate implementation offers the arbiter."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..region import Region
from ._values import Artifact, Availability, Config, KernelSource, Platform, Space

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Lane", "Runner", "refusal"]


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
        """Compute the region once into `out` (the region's storage dtype, C-contiguous, its
        output shape).

        Precondition: `out` may hold anything (the checker poisons it); every element must
        be overwritten. GPU runners copy inputs in and the result back.
        """

    def time(
        self, input_sets: Sequence[Mapping[str, np.ndarray]], *, warmup: int, repeats: int
    ) -> list[float]:
        """Seconds per call, one sample per repeat, after `warmup` untimed calls.

        Inputs are placed once per call of `time` (on the device for GPU lanes) and rotated
        through `input_sets`, so repeated calls do not all hit a warm cache. The arbiter
        calls it several times per candidate (once per interleaved round).
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
    # The storage dtypes it computes (a lane without the attribute: f32 only), see `refusal`.
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


def refusal(lane: Lane, region: Region) -> str | None:
    """Why `lane` does not compute `region` (None: it does): a storage dtype it does not list in
    `dtypes`, else its own `applies_to`."""
    dtypes = getattr(lane, "dtypes", ("f32",))
    if region.dtype not in dtypes:
        return f"{lane.name} computes {'/'.join(dtypes)} storage, not {region.dtype}"
    return lane.applies_to(region)
