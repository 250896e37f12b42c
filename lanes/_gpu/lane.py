"""What every GPU lane shares: where it runs, whether it can, how it builds and launches.

A base class rather than a Protocol because the behaviour is real and identical: the lane
runs on the detected GPU's platform (ROCm, the target, when there is none), builds through
`gpu_build` for that platform and launches through the runner ABI of arb_runner.h.
"""

from __future__ import annotations

from arbiter.lane import Artifact, Availability, KernelSource, Platform, Region

from . import build as _build
from . import detect as _detect
from .runner import GpuRunner

__all__ = ["GpuLane"]


class GpuLane:
    name: str

    @property
    def platform(self) -> Platform:
        """Where it would run here: the detected GPU's platform, else ROCm (the target)."""
        return _detect.gpu_platform()

    def available(self) -> Availability:
        ok, why = _detect.platform_report()
        return Availability(ok, why)

    def build(self, source: KernelSource) -> Artifact:
        return _build.gpu_build(self, source, self.platform)

    def runner(self, artifact: Artifact, region: Region) -> GpuRunner:
        return GpuRunner(artifact, region, self.platform)
