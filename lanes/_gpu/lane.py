"""What every GPU lane shares: where it runs, whether it can, how it builds and launches.

A base class rather than a Protocol because the behaviour is real and identical: the lane
runs on the detected GPU's platform (ROCm, the target, when there is none), builds through
`gpu_build` for that platform and launches through the runner ABI of arb_runner.h.

Under the gfx11 emulation (ARBITER_GFX11_EMULATION=1) the lane's code path is ROCm's (its
spaces and sources for gfx11) while it builds and runs on the NVIDIA GPU: nvcc with
arb_gfx11_emu.h standing in for the AMDGPU builtins. Correctness only, never speed.
"""

from __future__ import annotations

import dataclasses

from arbiter.lane import Artifact, Availability, KernelSource, Platform, Region

from . import build as _build
from . import detect as _detect
from .runner import GpuRunner

__all__ = ["EMULATION_DEFINE", "GpuLane"]

EMULATION_DEFINE = "-DARB_GFX11_EMU"


class GpuLane:
    name: str

    @property
    def platform(self) -> Platform:
        """The code path: the detected GPU's platform, else ROCm (the target); ROCm's when
        emulating gfx11."""
        return Platform.ROCM if _detect.emulating_gfx11() else _detect.gpu_platform()

    def available(self) -> Availability:
        ok, why = _detect.platform_report()
        if _detect.emulating_gfx11():
            gpu = _detect.detect_gpu()
            ok = ok and gpu is not None and gpu.platform is Platform.CUDA
            why = f"gfx11 emulation (ARBITER_GFX11_EMULATION) on an NVIDIA GPU; {why}"
        return Availability(ok, why)

    def build(self, source: KernelSource) -> Artifact:
        if _detect.emulating_gfx11():
            emulated = dataclasses.replace(source, options=(*source.options, EMULATION_DEFINE))
            return _build.gpu_build(self, emulated, Platform.CUDA)
        return _build.gpu_build(self, source, self.platform)

    def runner(self, artifact: Artifact, region: Region) -> GpuRunner:
        return GpuRunner(artifact, region, _detect.gpu_platform())
