"""torch as a GPU lane: cuBLAS / hipBLASLt matmul, eager epilogue, SDPA for attention, on
tensors of the region's storage dtype (float32, float16 or bfloat16), as users call them.

A candidate like any other, so a GPU winner is never slower than the library. torch is an
optional extra (`pip install arbiter-tune[gpu]`); without it, or without a GPU, the lane says so.
Inputs are placed on the device once per timing call; samples come from torch.cuda.Event
pairs around each call (HIP builds of torch map them to hip events).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

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
)

from .._gpu.detect import gpu_platform
from .._torch_region import (
    TorchRunner,
    compute,
    gpu_build,
    set_tf32,
    tf32_tunable,
    torch_module,
    usable_torch,
)

__all__ = ["TorchLane", "lane"]


@lru_cache(maxsize=1)
def _probe() -> tuple[bool, str, Platform | None]:
    torch, why = usable_torch("gpu")
    if why is not None:
        return False, why, None
    platform = gpu_build(torch)
    if not torch.cuda.is_available():
        build = "ROCm" if platform is Platform.ROCM else (
            f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only")
        return False, f"torch {torch.__version__} ({build} build) found, no usable GPU", platform
    name = torch.cuda.get_device_name(0)
    lib = "hipBLASLt/MIOpen" if platform is Platform.ROCM else "cuBLAS"
    return True, f"torch {torch.__version__}, {name} ({lib}, SDPA)", platform


class TorchLane:
    name = "torch"
    precisions = ("f32", "tf32", "f16", "bf16")
    dtypes = ("f32", "f16", "bf16")
    version = "1"

    @property
    def platform(self) -> Platform:
        found = _probe()[2]
        return found if found is not None else gpu_platform()

    def available(self) -> Availability:
        ok, why, _ = _probe()
        return Availability(ok, why)

    def applies_to(self, region: Region) -> str | None:
        return None

    def space(self, region: Region) -> Space:
        if isinstance(region, (FusedRegion, GatedRegion)) and region.dtype == "f32":
            return Space((tf32_tunable(region),))
        return Space()

    def emit(self, region: Region, config: Config) -> KernelSource:
        tf32 = bool(config.get("tf32", False))
        what = f"float32 (tf32={tf32})" if region.dtype == "f32" else region.dtype
        text = f"# torch eager {what}: {region.describe()}\n"
        return KernelSource(self.name, region.key, config, "python", text)

    def build(self, source: KernelSource) -> Artifact:
        version = torch_module().__version__ if _probe()[0] else "absent"
        return Artifact(self.name, f"torch-{version}-{source.config.key}", source, None, 0.0, True)

    def runner(self, artifact: Artifact, region: Region) -> TorchRunner:
        tf32 = bool(artifact.source.config.get("tf32", False))

        def call(tensors: Mapping[str, Any]) -> Any:
            set_tf32(tf32)  # (process-wide in torch: set at every call, other runners share it)
            return compute(region, tensors)

        return TorchRunner(region, call, "cuda")


lane = TorchLane()
