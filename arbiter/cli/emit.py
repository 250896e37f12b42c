"""`arbiter emit`: print a lane's generated source for one region, or its assembly (--asm).

GPU sources print the same text for either platform; with --asm they become AMDGPU ISA (rocm,
clang++ -x hip --cuda-device-only -S) or PTX (cuda, nvcc -ptx). C sources become gcc -S output.
No GPU is needed for any of it.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from .._errors import ArbiterError, BuildError, LaneError
from ..lane import KernelSource, Platform, get_lane, refusal, run_tool
from ..region import load_spec
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
    p.add_argument("--arch", help="target arch for --asm, e.g. gfx1151 or sm_90")
    p.add_argument("--asm", action="store_true",
                   help="print ISA (rocm) / PTX (cuda) / x86 assembly (C lanes) instead")


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
    source = lane.emit(region, config)
    if not args.asm:
        if args.arch or args.platform:
            raise ArbiterError("--platform/--arch only change --asm output (the source is the "
                               "same text for every target)")
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
