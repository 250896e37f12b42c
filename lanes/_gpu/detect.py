"""Which GPUs and GPU compilers exist on this machine, found once and cached.

Probes are cheap command-line tools (nvidia-smi, rocminfo / rocm_agent_enumerator), never a
runtime library load, so `arbiter lanes` stays fast and works where no driver is installed.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from functools import cache, lru_cache

from arbiter.lane import Platform, run_tool, settings

__all__ = [
    "DEFAULT_ROCM_ARCH",
    "DEFAULT_CUDA_ARCH",
    "Gpu",
    "Toolchain",
    "cuda_arch",
    "detect_gpu",
    "gpu_platform",
    "platform_report",
    "rocm_arch",
    "rocm_compiler",
    "toolchain",
]

DEFAULT_ROCM_ARCH = "gfx1151"
DEFAULT_CUDA_ARCH = "sm_90"
_ARCH_RE = {
    Platform.ROCM: re.compile(r"^gfx[0-9a-f]{3,5}$"),
    Platform.CUDA: re.compile(r"^sm_\d{2,3}a?$"),
}
_DEFAULT_ARCH = {Platform.ROCM: DEFAULT_ROCM_ARCH, Platform.CUDA: DEFAULT_CUDA_ARCH}


@dataclass(frozen=True)
class Gpu:
    platform: Platform
    name: str
    arch: str  # gfx1151, sm_90


@dataclass(frozen=True)
class Toolchain:
    nvcc: str | None
    hipcc: str | None
    clang: str | None  # a clang++ that takes -x hip (clang++-19 first)


def _nvidia() -> Gpu | None:
    if shutil.which("nvidia-smi") is None:
        return None
    rc, out = run_tool(["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                       timeout=20)
    if rc != 0:
        return None
    for line in out.splitlines():
        name, _, cap = line.rpartition(",")
        m = re.match(r"\s*(\d+)\.(\d+)", cap)
        if name.strip() and m:
            return Gpu(Platform.CUDA, name.strip(), f"sm_{m.group(1)}{m.group(2)}")
    return None


def _amd() -> Gpu | None:
    for tool, args in (("rocm_agent_enumerator", ()), ("rocminfo", ())):
        if shutil.which(tool) is None:
            continue
        rc, out = run_tool([tool, *args], timeout=20)
        if rc != 0:
            continue
        archs = [a for a in re.findall(r"\bgfx[0-9a-f]{3,5}\b", out) if a != "gfx000"]
        if archs:
            return Gpu(Platform.ROCM, f"AMD {archs[0]}", archs[0])
    return None


@lru_cache(maxsize=1)
def detect_gpu() -> Gpu | None:
    """The first GPU found (NVIDIA, then AMD), or None."""
    return _nvidia() or _amd()


@lru_cache(maxsize=1)
def toolchain() -> Toolchain:
    clang = next((c for c in ("clang++-19", "clang++") if shutil.which(c)), None)
    return Toolchain(shutil.which("nvcc") and "nvcc", shutil.which("hipcc") and "hipcc", clang)


def emulating_gfx11() -> bool:
    """ARBITER_GFX11_EMULATION: GPU lanes take their gfx11 code paths (ROCm spaces and
    sources), built by nvcc with arb_gfx11_emu.h and run on an NVIDIA GPU. For correctness
    only: the emulated WMMA is slow."""
    return settings().gfx11_emulation


def gpu_platform() -> Platform:
    """The platform a GPU lane would run on here: the detected GPU's, else ROCm (the target)."""
    gpu = detect_gpu()
    return gpu.platform if gpu else Platform.ROCM


def _checked_arch(platform: Platform, arch: str, source: str) -> str:
    if not _ARCH_RE[platform].match(arch):
        from arbiter import ArbiterError

        raise ArbiterError(f"{source}: {arch!r} is not a {platform.value} arch "
                           f"(like {_DEFAULT_ARCH[platform]})")
    return arch


_ARCH_SETTING = {Platform.ROCM: ("rocm_arch", "ARBITER_ROCM_ARCH"),
                 Platform.CUDA: ("cuda_arch", "ARBITER_CUDA_ARCH")}


def gpu_arch(platform: Platform, explicit: str | None = None) -> str:
    """--arch > ARBITER_{ROCM,CUDA}_ARCH > detected GPU of that platform > gfx1151 / sm_90."""
    if explicit:
        return _checked_arch(platform, explicit, "--arch")
    field, variable = _ARCH_SETTING[platform]
    env = getattr(settings(), field)
    if env:
        return _checked_arch(platform, env, variable)
    gpu = detect_gpu()
    return gpu.arch if gpu and gpu.platform is platform else _DEFAULT_ARCH[platform]


def rocm_arch(explicit: str | None = None) -> str:
    return gpu_arch(Platform.ROCM, explicit)


def cuda_arch(explicit: str | None = None) -> str:
    return gpu_arch(Platform.CUDA, explicit)


def rocm_compiler() -> str | None:
    """hipcc when present (it knows the ROCm install), else a clang++ that speaks HIP."""
    tc = toolchain()
    return tc.hipcc or tc.clang


@cache
def _version(tool: str) -> str:
    _, out = run_tool([tool, "--version"], timeout=30)
    m = re.search(r"release ([\d.]+)|HIP version: ([\d.]+)|version ([\d.]+)", out)
    return f"{tool} {next(g for g in m.groups() if g)}" if m else tool


def platform_report() -> tuple[bool, str]:
    """(can a GPU lane run here, one line per platform saying what is there and what is not)."""
    gpu = detect_gpu()
    tc = toolchain()
    cuda_gpu = gpu.name + f" ({gpu.arch})" if gpu and gpu.platform is Platform.CUDA else None
    amd_gpu = gpu.name if gpu and gpu.platform is Platform.ROCM else None
    cuda = "cuda: " + ", ".join([
        f"{_version('nvcc')} found" if tc.nvcc else "no nvcc",
        f"GPU {cuda_gpu} present" if cuda_gpu else "no NVIDIA GPU",
    ])
    if tc.hipcc:
        rcc = f"{_version('hipcc')} found"
    elif tc.clang:
        rcc = f"no hipcc, {tc.clang} found (gfx ISA only without ROCm runtime)"
    else:
        rcc = "no hipcc or clang++"
    rocm = "rocm: " + ", ".join([rcc, f"GPU {amd_gpu} present" if amd_gpu else "no AMD GPU"])
    ok = bool((cuda_gpu and tc.nvcc) or (amd_gpu and rocm_compiler()))
    return ok, f"{cuda}; {rocm}"
