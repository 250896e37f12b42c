"""torch.compile (Inductor) as a lane: the region's PyTorch function, the one the `torch` lane
runs eagerly, compiled the way a PyTorch user would fuse it instead of writing a kernel, so a
winner is never slower than what they would pick.

On a GPU (CUDA, or ROCm where torch is a ROCm build) Inductor generates Triton kernels; the
space is the mode (`max-autotune-no-cudagraphs`, which benchmarks GEMM templates against the
vendor library and tunes the fused kernels' launch parameters, or `default`) and, for float32
matmuls, TF32. Without a GPU it generates C++ (OpenMP, vectorized) built by the host compiler
(`CXX`, else g++), and the space is one config: max-autotune on a CPU only adds a C++ GEMM
template for constant (frozen) weights, and every operand of a region is an input, so it
would compile the same code again. Shapes are static (`dynamic=False`: each region has one
shape) and the whole region must be one graph (`fullgraph=True`).

torch is an optional extra (`pip install arbiter-tune[inductor]`); without it the lane says so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from arbiter.lane import (
    Artifact,
    Availability,
    Config,
    FusedRegion,
    GatedRegion,
    KernelSource,
    Platform,
    Region,
    Space,
    Tunable,
)

from .._torch_region import gpu_build, tf32_tunable, usable_torch
from .build import build

if TYPE_CHECKING:
    from .run import InductorRunner

__all__ = ["InductorLane", "lane"]

MODES = ("max-autotune-no-cudagraphs", "default")


def _cxx() -> str:
    """The C++ compiler Inductor's CPU backend calls (its own default: `CXX`, else g++)."""
    return os.environ.get("CXX", "g++")


@lru_cache(maxsize=1)
def _probe() -> tuple[str | None, Platform, str]:
    """(why not, when torch is missing or broken; platform; what it runs on, for the reason and
    the build key)."""
    torch, why = usable_torch("inductor")
    if why is not None:
        return why, Platform.CPU, ""
    if torch.cuda.is_available():
        target = f"{torch.cuda.get_device_name(0)}, Triton {_triton_version()}"
        return None, gpu_build(torch), f"torch {torch.__version__} {target}"
    return None, Platform.CPU, f"torch {torch.__version__} cpu"


def _triton_version() -> str:
    try:
        from importlib.metadata import version

        return version("triton") if importlib.util.find_spec("triton") else "absent"
    except Exception:  # noqa: BLE001  (a version string, never a reason to fail)
        return "unknown"


class InductorLane:
    name = "inductor"
    precisions = ("f32", "tf32", "f16", "bf16")
    dtypes = ("f32", "f16", "bf16")
    version = "1"

    @property
    def platform(self) -> Platform:
        return _probe()[1]

    @property
    def device(self) -> str:
        return "cpu" if self.platform is Platform.CPU else "cuda"

    def available(self) -> Availability:
        why, platform, target = _probe()
        if why is not None:
            return Availability(False, why)
        if platform is not Platform.CPU:
            return Availability(True, f"{target} (Inductor)")
        cxx = shutil.which(_cxx())
        if cxx is None:
            return Availability(False, f"{target}, no GPU, and Inductor's C++ compiler "
                                       f"{_cxx()!r} is not on PATH (set CXX)")
        return Availability(True, f"{target} (Inductor, C++ via {cxx})")

    def applies_to(self, region: Region) -> str | None:
        return None

    def space(self, region: Region) -> Space:
        if self.platform is Platform.CPU:
            return Space((Tunable("mode", ("default",), "default"),))
        tunables = [Tunable("mode", MODES, MODES[0])]
        if isinstance(region, (FusedRegion, GatedRegion)) and region.dtype == "f32":
            tunables.append(tf32_tunable(region))
        return Space(tuple(tunables))

    def emit(self, region: Region, config: Config) -> KernelSource:
        """What the build compiles, readable: the call a user would write, the region, and its
        canonical form on the last line (the build reads the region from it)."""
        options = f"mode={config.get('mode', 'default')!r}, dynamic=False, fullgraph=True"
        tf32 = " tf32" if config.get("tf32", False) else ""
        text = (f"# torch.compile(region_graph, {options}) on {self.device}{tf32}\n"
                f"# region {region.key}: {region.describe()}\n"
                f"{json.dumps(region.canonical(), sort_keys=True)}\n")
        return KernelSource(self.name, region.key, config, "python", text)

    def build(self, source: KernelSource) -> Artifact:
        compiler = _cxx() if self.platform is Platform.CPU else ""
        return build(source, self.device, compiler, f"{self.version} {_probe()[2]}")

    def runner(self, artifact: Artifact, region: Region) -> InductorRunner:
        from .run import InductorRunner

        if artifact.path is None:
            raise RuntimeError("inductor: the artifact names no build record")
        try:
            made = json.loads(Path(artifact.path).read_text())
        except (OSError, ValueError) as e:
            raise RuntimeError(f"inductor: {artifact.path}: {e}") from e
        return InductorRunner(region, artifact.source.config, made["device"],
                              made["inductor_cache"])


lane = InductorLane()
