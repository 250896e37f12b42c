"""What a gfx1151 build of a GPU lane uses per kernel (VGPRs, SGPRs, LDS, scratch) and how
many waves per SIMD that allows.

The numbers come from the code object's own metadata (the `amdhsa.kernels` YAML that clang
prints in `-S` output and `llvm-readelf --notes` prints from a linked code object), never from
guesses; the occupancy is a model over those numbers and the target's limits below.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from arbiter.lane import BuildError, build_key, cached_build, run_tool

from . import build as _build
from .detect import rocm_arch

__all__ = ["GFX1151", "KernelResources", "Target", "build_resources", "candidate_resources",
           "device_code", "dynamic_lds", "launch_problems", "parse_metadata", "so_resources",
           "summary", "waves_per_simd"]


@dataclass(frozen=True)
class Target:
    """The limits of one AMDGPU target that decide whether and how a kernel launches."""

    name: str
    wave: int
    vgprs_per_simd: int  # per lane of a wave, i.e. the VGPR file over the wave width
    vgpr_granule: int  # VGPRs are allocated to a wave in blocks of this many
    max_waves_per_simd: int
    simds_per_wgp: int
    lds_per_workgroup: int  # bytes one workgroup may allocate
    lds_per_wgp: int  # bytes the WGP's workgroups share (WGP mode, the HIP default)
    max_threads: int  # work-items per workgroup


# Sources, one per number:
# - VGPRs 1536 per SIMD lane in wave32, granule 24: LLVM AMDGPUBaseInfo.cpp getTotalNumVGPRs /
#   getVGPRAllocGranule (the 1.5x-VGPR feature), and llvm/test/CodeGen/AMDGPU/
#   occupancy-levels.ll checks gfx1151 with the gfx1100 (1.5x) prefixes, not gfx1150's. Seen
#   here too: clang-19 reports 233 VGPRs -> "; Occupancy: 6" (1536 // 240).
# - 16 waves per SIMD: AMDGPUBaseInfo.cpp getMaxWavesPerEU (GFX10.3+); clang-19's
#   "; Occupancy: 16" for small gfx1151 kernels.
# - LDS 64 KiB per workgroup: AMDGPUBaseInfo.cpp getAddressableLocalMemorySize (65536 from
#   GFX7 on); 128 KiB per WGP and 2 CUs x 2 SIMDs per WGP: AMD RDNA3 / RDNA3.5 ISA reference
#   guide (WGP chapter) and ROCm's RDNA WGP documentation.
# - 1024 work-items per workgroup: AMDGPUUsage (amdgpu-flat-work-group-size default 1,1024),
#   HIP's maxThreadsPerBlock.
GFX1151 = Target(name="gfx1151", wave=32, vgprs_per_simd=1536, vgpr_granule=24,
                 max_waves_per_simd=16, simds_per_wgp=4, lds_per_workgroup=64 * 1024,
                 lds_per_wgp=128 * 1024, max_threads=1024)


@dataclass(frozen=True)
class KernelResources:
    """One kernel of a code object, as its metadata states it (LDS: the static part)."""

    name: str
    vgprs: int
    sgprs: int
    lds: int  # .group_segment_fixed_size: static shared memory, bytes per workgroup
    scratch: int  # .private_segment_fixed_size: bytes per work-item
    vgpr_spills: int
    sgpr_spills: int
    dynamic_stack: bool  # a call or alloca of unknown size: scratch at run time
    max_threads: int  # .max_flat_workgroup_size (its __launch_bounds__, else 1024)


_FIELDS = {"name": ".name", "vgprs": ".vgpr_count", "sgprs": ".sgpr_count",
           "lds": ".group_segment_fixed_size", "scratch": ".private_segment_fixed_size",
           "vgpr_spills": ".vgpr_spill_count", "sgpr_spills": ".sgpr_spill_count",
           "dynamic_stack": ".uses_dynamic_stack", "max_threads": ".max_flat_workgroup_size"}
_ITEM = re.compile(r"^(\s*)- \.")
_KEY = re.compile(r"^(\s*)(\.[a-z_]+):\s*(\S*)")


def parse_metadata(text: str) -> list[KernelResources]:
    """The kernels of an `amdhsa.kernels` YAML list (from `-S` output or `readelf --notes`).

    A line parser: each kernel is a list item; its own keys sit two columns right of the
    item's dash, its arguments' keys deeper."""
    kernels: list[dict[str, str]] = []
    at = text.find("amdhsa.kernels:")
    indent = -1  # the kernels' list items' column, once seen
    for line in text[at:].splitlines()[1:] if at >= 0 else []:
        item = _ITEM.match(line)
        if item and indent in (-1, len(item.group(1))):
            indent = len(item.group(1))
            kernels.append({})
            line = line.replace("- ", "  ", 1)
        elif indent >= 0 and line.strip() and len(line) - len(line.lstrip()) <= indent:
            break  # the next top-level key (amdhsa.target, ...)
        key = _KEY.match(line)
        if kernels and key and len(key.group(1)) == indent + 2:
            kernels[-1][key.group(2)] = key.group(3)
    out = []
    for k in kernels:
        got = {f: k.get(src, "0") for f, src in _FIELDS.items()}
        out.append(KernelResources(
            name=got.pop("name"), dynamic_stack=got.pop("dynamic_stack") == "true",
            **{f: int(v) for f, v in got.items()}))
    return [k for k in out if k.name]


def waves_per_simd(vgprs: int, lds: int, threads: int, target: Target = GFX1151) -> int:
    """Waves of one kernel a SIMD can hold: the least of the hardware cap, the VGPR file
    (allocated in granules) and the LDS the WGP's workgroups share; 0 when it cannot launch
    (over the workgroup's LDS or thread limit). A model: it ignores barriers and SGPRs
    (never the limit on gfx10+)."""
    if threads > target.max_threads or lds > target.lds_per_workgroup:
        return 0
    granules = -(-max(vgprs, 1) // target.vgpr_granule)
    by_vgprs = target.vgprs_per_simd // (granules * target.vgpr_granule)
    waves = min(target.max_waves_per_simd, by_vgprs)
    if lds > 0:
        groups = target.lds_per_wgp // lds
        waves_per_group = -(-threads // target.wave)
        waves = min(waves, max(1, groups * waves_per_group // target.simds_per_wgp))
    return waves


def summary(kernels: list[KernelResources], dynamic_lds: dict[str, int] | None = None,
            target: Target = GFX1151) -> dict:
    """JSON-ready resources of one candidate: each kernel with its LDS (static, plus the
    bytes `dynamic_lds` gives the kernels whose names contain its keys, asked for at launch)
    and its waves per SIMD at its launch bounds; then the candidate's worst case over its
    kernels (`waves_per_simd`: its least occupied kernel)."""
    rows = []
    for k in kernels:
        lds = k.lds + sum(n for part, n in (dynamic_lds or {}).items() if part in k.name)
        rows.append({**asdict(k), "lds": lds,
                     "waves_per_simd": waves_per_simd(k.vgprs, lds, k.max_threads, target)})
    return {
        "arch": target.name,
        "vgprs": max((r["vgprs"] for r in rows), default=0),
        "sgprs": max((r["sgprs"] for r in rows), default=0),
        "lds": max((r["lds"] for r in rows), default=0),
        "scratch": max((r["scratch"] for r in rows), default=0),
        "spills": sum(r["vgpr_spills"] + r["sgpr_spills"] for r in rows),
        "dynamic_stack": any(r["dynamic_stack"] for r in rows),
        "waves_per_simd": min((r["waves_per_simd"] for r in rows), default=0),
        "kernels": rows,
    }


def build_resources(text: str, arch: str | None = None, options: tuple[str, ...] = (),
                    lane: str = "") -> list[KernelResources]:
    """The kernels' metadata of `device_code`."""
    return parse_metadata(device_code(text, arch, options, lane))


def device_code(text: str, arch: str | None = None, options: tuple[str, ...] = (),
                lane: str = "") -> str:
    """Compile `text` device-only for `arch` exactly as `rocm_shared_object` links it (same
    flags, the same fence shim): its assembly, metadata included. Cached by content like a
    build; no GPU and no device libraries needed."""
    arch = rocm_arch(arch)
    probe = _build.rocm_shared_command(arch, "SRC", "OUT", "SHIM", options)
    key = build_key(source=text + "\0" + _build._headers_digest(), compiler=probe[0],
                    flags=[*probe, "--cuda-device-only", "-S"], arch=arch,
                    lane=f"resources:{lane}")

    def compile_asm(tmp: Path, target: Path) -> tuple[int, str]:
        src, shim = tmp / "kernel.hip", tmp / "arb_shim.h"
        src.write_text(text)
        shim.write_text(_build._FENCE_SHIM)
        argv = _build.rocm_shared_command(arch, str(src), str(target), str(shim), options)
        return run_tool([*argv, "--cuda-device-only", "-S", "-Wno-unused-command-line-argument"],
                        timeout=600, cwd=str(tmp))

    path, _, _, _ = cached_build(key, ".s", compile_asm)
    return path.read_text()


def _tool(name: str) -> str | None:
    for candidate in (f"{name}-19", name, f"/opt/rocm/llvm/bin/{name}"):
        found = shutil.which(candidate)
        if found:
            return found
    return None


def so_resources(so: str | Path, arch: str) -> list[KernelResources] | None:
    """The kernels of the `arch` code object inside a built ROCm shared object (its
    .hip_fatbin bundle), or None when the LLVM tools to read it are missing."""
    tools = [_tool(t) for t in ("llvm-objcopy", "clang-offload-bundler", "llvm-readelf")]
    objcopy, bundler, readelf = tools
    if objcopy is None or bundler is None or readelf is None:
        return None
    with tempfile.TemporaryDirectory(prefix="arbiter-co-") as tmp:
        fatbin, co, rest = (str(Path(tmp) / n) for n in ("fatbin", "co", "rest"))
        rc, log = run_tool([objcopy, f"--dump-section=.hip_fatbin={fatbin}", str(so), rest])
        if rc != 0:
            raise BuildError(f"{so}: no .hip_fatbin section", log)
        rc, listed = run_tool([bundler, "--list", "--type=o", f"--input={fatbin}"])
        targets = [t for t in listed.split() if t.endswith(f"--{arch}")] if rc == 0 else []
        if not targets:
            raise BuildError(f"{so}: no {arch} code object in its bundle", listed)
        rc, log = run_tool([bundler, "--unbundle", "--type=o", f"--input={fatbin}",
                            f"--targets={targets[0]}", f"--output={co}"])
        if rc != 0:
            raise BuildError(f"{so}: cannot unbundle {targets[0]}", log)
        rc, notes = run_tool([readelf, "--notes", co])
        if rc != 0:
            raise BuildError(f"{so}: cannot read the code object's notes", notes)
    return parse_metadata(notes)


def dynamic_lds(text: str, launch_lds: tuple[tuple[str, str], ...]) -> dict[str, int]:
    """{kernel name part: bytes} of shared memory asked for at launch, read from the emitted
    source's own `#define MACRO n` (the value the launch passes), for each (kernel part,
    macro) the lane names."""
    out = {}
    for part, macro in launch_lds:
        found = re.search(rf"^#define {re.escape(macro)} (\d+)\b", text, re.M)
        if found:
            out[part] = int(found.group(1))
    return out


def candidate_resources(lane: Any, region: Any, config: Any, arch: str | None = None) -> dict:
    """`summary` of a GPU lane's build of (region, config) for `arch` (default gfx1151):
    the lane's own source (its code path here), compiled device-only by `build_resources`."""
    source = lane.emit(region, config)
    kernels = build_resources(source.text, arch, source.options, lane.name)
    return summary(kernels, dynamic_lds(source.text, getattr(lane, "launch_lds", ())))


def launch_problems(res: dict, target: Target = GFX1151) -> list[str]:
    """Why a candidate with these resources (`summary`) cannot launch on `target`, or would
    touch scratch there: empty when it fits."""
    out = []
    for k in res["kernels"]:
        name = k["name"]
        if k["lds"] > target.lds_per_workgroup:
            out.append(f"{name}: {k['lds']} bytes of LDS > {target.lds_per_workgroup} per "
                       "workgroup")
        if k["max_threads"] > target.max_threads:
            out.append(f"{name}: {k['max_threads']} threads > {target.max_threads}")
        if k["scratch"] or k["vgpr_spills"] or k["sgpr_spills"] or k["dynamic_stack"]:
            out.append(f"{name}: scratch {k['scratch']} bytes, spills {k['vgpr_spills']} VGPR "
                       f"{k['sgpr_spills']} SGPR, dynamic stack {k['dynamic_stack']}")
    return out
