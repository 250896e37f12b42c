"""Triton as a lane: fixed kernel templates (`kernels.py`) for fused matmuls (tiled `tl.dot`,
epilogue and residual fused, the row reduction too when the row fits one tile), gated
feed-forwards, rowwise chains and flash attention, in f32, f16 and bf16 storage (f32
accumulation); tuned over what Triton users search (`space.py`).

Where it runs: on a CUDA or ROCm GPU that torch sees (torch holds the tensors; Triton launches
on its stream), timed with device events. Without a GPU it is unavailable, unless
`ARBITER_TRITON_INTERPRET=1`: then the kernels run in Triton's interpreter on the CPU, for
correctness only (its timings mean nothing; the records carry the setting in their
fingerprint). Ahead-of-time compiles for any sm_NN or gfxNNNN need triton only (`aot.py`).

torch and triton are an optional extra (`pip install arbiter-tune[triton]`).
"""

from __future__ import annotations

import importlib.util
import json
import re
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from arbiter.lane import (
    Artifact,
    Availability,
    Config,
    KernelSource,
    Platform,
    Region,
    Space,
    settings,
)

from .._torch_region import gpu_build, usable_torch
from .build import build
from .plan import BUFFER, plan
from .space import space

if TYPE_CHECKING:
    from .run import TritonRunner

__all__ = ["TritonLane", "lane"]


def triton_version() -> str:
    try:
        return version("triton")
    except PackageNotFoundError:
        return ""


def _release(text: str) -> tuple[int, int]:
    """(major, minor) of a version string such as 3.6.0, 2.4rc1 or 3.7.0+git1234."""
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m[1]), int(m[2])) if m else (0, 0)


def interpreter_fault() -> str | None:
    """Triton's interpreter before 3.7 calls int() on one-element arrays, which numpy 2.4
    refuses (triton-lang/triton#9171): every kernel with a loop over a scalar argument fails."""
    ours, numpy_ = triton_version(), version("numpy")
    if ours and _release(ours) < (3, 7) and _release(numpy_) >= (2, 4):
        return (f"triton {ours}'s interpreter fails with numpy {numpy_} (triton-lang/triton#9171):"
                " it needs triton >= 3.7 or numpy < 2.4")
    return None


@lru_cache(maxsize=1)
def _probe() -> tuple[str | None, Platform, str, int]:
    """(why no GPU run, when not; platform; arch as sm_NN / gfxNNNN; shared memory per
    block). Never imports triton: whether it compiles or interprets is fixed at its import."""
    if importlib.util.find_spec("triton") is None:
        return "triton not installed (optional extra: pip install arbiter-tune[triton])", \
            Platform.CPU, "", 0
    torch, why = usable_torch("triton")  # (torch holds the tensors)
    if why is not None:
        return why, Platform.CPU, "", 0
    if not torch.cuda.is_available():
        return f"no GPU (torch {torch.__version__} sees none)", Platform.CPU, "", 0
    props = torch.cuda.get_device_properties(0)
    shared = int(getattr(props, "shared_memory_per_block_optin", 0))
    if gpu_build(torch) is Platform.ROCM:
        return None, Platform.ROCM, props.gcnArchName.split(":")[0], shared
    major, minor = torch.cuda.get_device_capability(0)
    return None, Platform.CUDA, f"sm_{major}{minor}", shared


def interpreting() -> bool:
    """Triton's interpreter on the CPU instead of a GPU (ARBITER_TRITON_INTERPRET)."""
    return settings().triton_interpret


class TritonLane:
    name = "triton"
    precisions = ("f32", "tf32", "f16", "bf16")
    dtypes = ("f32", "f16", "bf16")
    version = "1"

    @property
    def platform(self) -> Platform:
        return Platform.CPU if interpreting() else _probe()[1]

    def available(self) -> Availability:
        why, platform, arch, _ = _probe()
        ours = f"triton {triton_version()}"
        if interpreting():
            if why is not None and why.startswith(("triton", "torch")):
                return Availability(False, why)
            if (fault := interpreter_fault()) is not None:
                return Availability(False, fault)
            return Availability(True, f"{ours} interpreter on the CPU (ARBITER_TRITON_INTERPRET):"
                                      " correctness only, its timings mean nothing")
        if why is not None:
            if why.startswith("no GPU"):
                why += "; ARBITER_TRITON_INTERPRET=1 runs it in Triton's interpreter (CPU)"
            return Availability(False, why)
        return Availability(True, f"{ours} for {arch} ({platform.value})")

    def applies_to(self, region: Region) -> str | None:
        return None

    def space(self, region: Region) -> Space:
        return space(region, self.platform)

    def emit(self, region: Region, config: Config) -> KernelSource:
        """The launches, readable (a call per kernel, as a Triton user writes it), the region,
        and its canonical form on the last line (what the build compiles from)."""
        lines = [f"# triton lane v{self.version}: region {region.key} {region.describe()}",
                 f"# config: {config}", "# from arbiter.lanes.triton import kernels"]
        for launch in plan(region, config, interpreting()):
            args = ", ".join(v if kind == BUFFER else f"{p}={v!r}" for p, kind, v in launch.args)
            keys = ", ".join(f"{k}={v!r}" for k, v in (*launch.constexprs,
                                                       *launch.options().items()))
            lines.append(f"kernels.{launch.kernel}[{launch.grid}]({args}, {keys})")
        lines.append(json.dumps(region.canonical(), sort_keys=True))
        return KernelSource(self.name, region.key, config, "triton", "\n".join(lines) + "\n")

    def build(self, source: KernelSource) -> Artifact:
        _, _, arch, shared = _probe()
        return build(source, None if interpreting() else arch, shared,
                     f"{self.version} triton {triton_version()}")

    def runner(self, artifact: Artifact, region: Region) -> TritonRunner:
        from .run import TritonRunner

        return TritonRunner(region, artifact.source.config, interpreting())


lane = TritonLane()
