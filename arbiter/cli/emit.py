"""`arbiter emit`: print a lane's generated source for one region, or its assembly (--asm),
or write the shared object a ROCm machine would load (--shared), or print what its gfx build
uses per kernel and the waves per SIMD that allows (--resources, JSON).

GPU sources print the same text for either platform; with --asm they become AMDGPU ISA (rocm,
clang++ -x hip --cuda-device-only -S) or PTX (cuda, nvcc -ptx). C sources become gcc -S output.
--shared links a GPU lane's source for ROCm: host wrapper plus the gfxNNNN code object.
No GPU is needed for any of it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from .._errors import ArbiterError, BuildError, LaneError
from ..lane import Config, KernelSource, Lane, Platform, get_lane, refusal, run_tool
from ..region import Region, load_spec
from ..settings import settings

_PLATFORMS = ("rocm", "cuda")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="region spec file (TOML)")
    p.add_argument("region", help="region name in the spec")
    p.add_argument("--lane", required=True, help="lane whose code to print")
    p.add_argument("--config", action="append", default=[], metavar="K=V",
                   help="tunable value (repeatable); others take the lane's defaults")
    p.add_argument("--platform", choices=_PLATFORMS,
                   help="GPU platform for --asm (default: the lane's platform here)")
    p.add_argument("--arch", help="target arch for --asm/--shared, e.g. gfx1151 or sm_90")
    p.add_argument("--asm", action="store_true",
                   help="print ISA (rocm) / PTX (cuda) / x86 assembly (C lanes) instead")
    p.add_argument("--shared", metavar="OUT.so",
                   help="GPU lanes: write the ROCm shared object (host runner + --arch code "
                        "object, default gfx1151) to OUT.so instead")
    p.add_argument("--resources", action="store_true",
                   help="GPU lanes: print the --arch (default gfx1151) build's VGPRs, SGPRs, "
                        "LDS, scratch and waves per SIMD per kernel as one JSON object")


def _c_asm(source: KernelSource) -> str:
    from ..lanes.x86_c.build import BASE_FLAGS

    flags = [f for f in BASE_FLAGS if f not in ("-shared", "-fPIC")]
    with tempfile.TemporaryDirectory(prefix="arbiter-asm-") as tmp:
        src, out = Path(tmp) / "kernel.c", Path(tmp) / "kernel.s"
        src.write_text(source.text)
        argv = [settings().cc, *flags, *source.options, "-S", "-o", str(out), str(src)]
        rc, log = run_tool(argv, timeout=300)
        if rc != 0 or not out.exists():
            raise BuildError(f"{argv[0]} -S failed (exit {rc})", log)
        return out.read_text()


def main(args: argparse.Namespace) -> int:
    from ..api import parse_config

    region = load_spec(args.spec).get(args.region)
    lane = get_lane(args.lane)
    why = refusal(lane, region)
    if why is not None:
        raise LaneError(f"lane {args.lane!r} does not apply to {region.label}: {why}")
    config = parse_config(lane, region, args.config)
    if args.resources:
        return _resources(args, lane, region, config)
    source = lane.emit(region, config)
    if args.shared:
        return _shared(args, source)
    if not args.asm:
        if args.arch or args.platform:
            raise ArbiterError("--platform/--arch only change --asm/--shared output (the source "
                               "is the same text for every target)")
        print(source.text, end="" if source.text.endswith("\n") else "\n")
        return 0
    if source.language == "hip":
        from ..lanes._gpu.build import device_asm

        platform = Platform(args.platform) if args.platform else lane.platform
        try:
            text = device_asm(source.text, platform, args.arch, source.options)
        except BuildError as e:
            raise BuildError(f"{e}\n{e.log.strip()}") from None
    elif source.language == "c":
        if args.platform or args.arch:
            raise ArbiterError(f"lane {args.lane!r} is a CPU lane: no --platform/--arch")
        try:
            text = _c_asm(source)
        except BuildError as e:
            raise BuildError(f"{e}\n{e.log.strip()}") from None
    else:
        raise ArbiterError(f"lane {args.lane!r} generates no code ({source.language}); "
                           "drop --asm to see what it runs")
    print(text, end="")
    return 0


def _shared(args: argparse.Namespace, source: KernelSource) -> int:
    """Link the ROCm shared object for a GPU lane's source into args.shared."""
    from ..lanes._gpu.build import rocm_shared_object
    from ..lanes._gpu.detect import rocm_arch

    if args.asm:
        raise ArbiterError("--shared and --asm are exclusive")
    if source.language != "hip":
        raise ArbiterError(f"lane {args.lane!r} is not a GPU lane: --shared links GPU lanes only")
    if args.platform not in (None, "rocm"):
        raise ArbiterError("--shared builds the ROCm artifact only: use --platform rocm")
    arch = rocm_arch(args.arch)  # --arch is checked (gfxNNNN) before any compiler runs
    out = Path(args.shared).resolve()
    if out.is_dir() or not out.parent.is_dir() or not os.access(out.parent, os.W_OK):
        raise ArbiterError(f"--shared: cannot write {args.shared} (not a writable file path)")
    try:
        rocm_shared_object(source.text, out, arch, source.options)
    except BuildError as e:
        errors = [ln for ln in e.log.splitlines() if "error" in ln][:3]
        raise BuildError("; ".join([str(e), *errors])) from None
    except OSError as e:
        raise ArbiterError(f"--shared: cannot write {args.shared}: {e.strerror}") from None
    print(f"wrote {out} ({source.lane}, {arch})")
    return 0


def _resources(args: argparse.Namespace, lane: Lane, region: Region, config: Config) -> int:
    """One JSON object: the candidate, then its gfx build's resources (lanes/_gpu/resources)."""
    import json

    from ..lanes._gpu.detect import rocm_arch
    from ..lanes._gpu.lane import GpuLane
    from ..lanes._gpu.resources import candidate_resources

    if args.asm or args.shared:
        raise ArbiterError("--resources is exclusive with --asm and --shared")
    if args.platform not in (None, "rocm"):
        raise ArbiterError("--resources reads gfx code objects only: use --platform rocm")
    if not isinstance(lane, GpuLane):
        raise ArbiterError(f"lane {args.lane!r} is not a GPU lane: --resources reads GPU builds")
    arch = rocm_arch(args.arch)  # checked (gfxNNNN) before any compiler runs
    try:
        res = candidate_resources(lane, region, config, arch)
    except BuildError as e:
        errors = [ln for ln in e.log.splitlines() if "error" in ln][:3]
        raise BuildError("; ".join([str(e), *errors])) from None
    print(json.dumps({"lane": lane.name, "region": region.label, "config": config.as_dict(),
                      **res}, indent=1))
    return 0
