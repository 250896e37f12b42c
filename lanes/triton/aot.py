"""Ahead-of-time compiles of a candidate's launches for a GPU target, no GPU needed:
Triton's own `triton.compile` of each template with the plan's signature, constexprs and
options, for `sm_NN` (PTX and cubin) or `gfxNNNN` (AMDGCN assembly and hsaco). For gfx
targets the kernel's metadata (VGPRs, SGPRs, LDS, scratch, spills) goes through the same fit
check as the HIP lanes' builds (`lanes/_gpu/resources.py`).

Needs triton (not torch) imported in compile mode: a process running Triton's interpreter
cannot compile, so the build runs this module as a process of its own:
`python -m arbiter.lanes.triton.aot REQUEST.json RESULT.json`.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from arbiter.lane import Config, Region

from .._gpu.resources import GFX1151, launch_problems, parse_metadata, summary
from .plan import BUFFER, F32, I32, Launch, buffers, plan

__all__ = ["compile_candidate", "gpu_target", "main"]

_POINTER = {"f32": "*fp32", "f16": "*fp16", "bf16": "*bf16"}
_ARCH = re.compile(r"^(sm_(\d+)a?|gfx[0-9a-f]{3,4})$")


def gpu_target(arch: str) -> Any:
    """Triton's `GPUTarget` for `sm_90`-style or `gfx1151`-style names (wave32 on gfx10+,
    wave64 on gfx9)."""
    from triton.backends.compiler import GPUTarget

    found = _ARCH.match(arch)
    if found is None:
        raise ValueError(f"unknown GPU arch {arch!r} (expected sm_NN or gfxNNNN)")
    if found.group(2):
        return GPUTarget("cuda", int(found.group(2)), 32)
    return GPUTarget("hip", arch, 64 if arch.startswith("gfx9") else 32)


def _signature(fn: Any, launch: Launch, dtypes: dict[str, str]) -> dict[str, str]:
    scalars = {I32: "i32", F32: "fp32"}
    kinds = {param: _POINTER[dtypes[value]] if kind == BUFFER else scalars[kind]
             for param, kind, value in launch.args}
    constexprs = dict(launch.constexprs)
    return {name: "constexpr" if name in constexprs else kinds[name] for name in fn.arg_names}


def compile_launch(launch: Launch, dtypes: dict[str, str], arch: str) -> tuple[Any, float]:
    """(Triton's compiled kernel, seconds) of one launch for `arch`."""
    import triton
    from triton.compiler import ASTSource

    from . import kernels

    fn = getattr(kernels, launch.kernel)
    target = gpu_target(arch)
    options: dict[str, Any] = dict(launch.options())
    if target.backend != "hip":
        options.pop("waves_per_eu", None)
    source = ASTSource(fn=fn, signature=_signature(fn, launch, dtypes),
                       constexprs=dict(launch.constexprs))
    t0 = time.perf_counter()
    compiled = triton.compile(source, target=target, options=options)
    return compiled, time.perf_counter() - t0


def compile_candidate(region: Region, config: Config, arch: str,
                      keep_asm: bool = False) -> dict[str, Any]:
    """Every launch of (region, config) compiled for `arch`: per kernel the binary kinds made,
    shared memory and compile seconds; for gfx targets its resources (`summary`) and why it
    would not launch there, or would touch scratch (`problems`, empty when it fits)."""
    launches = plan(region, config)
    dtypes = {name: region.dtype for name in _input_names(launches)}
    dtypes.update({name: dt for name, (_, dt) in buffers(region, launches).items()})
    kernels, metadata, seconds, shared = [], [], 0.0, {}
    for launch in launches:
        compiled, took = compile_launch(launch, dtypes, arch)
        seconds += took
        row: dict[str, Any] = {"kernel": launch.kernel, "binaries": sorted(compiled.asm),
                               "shared": int(compiled.metadata.shared), "seconds": took}
        shared[launch.kernel] = row["shared"]  # (Triton's LDS is sized at launch)
        if "amdgcn" in compiled.asm:
            text = compiled.asm["amdgcn"]
            metadata += parse_metadata(text)
            row["wmma"] = sorted(set(re.findall(r"\bv_wmma_\w+", text)))
        if keep_asm:
            row["asm"] = {k: v for k, v in compiled.asm.items() if isinstance(v, str)}
        kernels.append(row)
    out: dict[str, Any] = {"arch": arch, "kernels": kernels, "compile_seconds": seconds}
    if metadata:
        res = summary(metadata, shared)
        res["arch"] = arch
        out["resources"] = res
        out["problems"] = launch_problems(res, GFX1151) if arch == "gfx1151" else []
    return out


def _input_names(launches: list[Launch]) -> set[str]:
    return {v for launch in launches for _, kind, v in launch.args if kind == BUFFER}


def main(argv: list[str]) -> int:
    """REQUEST.json: {"region": canonical, "config": {...}, "arch": "sm_90" | "gfx1151",
    "asm": bool}; writes the `compile_candidate` result to RESULT.json."""
    from arbiter.region import region_from_canonical

    request, result = (Path(a) for a in argv)
    req = json.loads(request.read_text())
    region = region_from_canonical(req["region"])
    got = compile_candidate(region, Config.of(req["config"]), req["arch"], req.get("asm", False))
    result.write_text(json.dumps(got) + "\n")
    import triton

    print(f"triton {triton.__version__}: {region.describe()} {req['config']} for {req['arch']} "
          f"in {got['compile_seconds']:.2f} s")
    return 0


if __name__ == "__main__":
    os.environ.pop("TRITON_INTERPRET", None)  # (before triton is imported: compile mode)
    sys.exit(main(sys.argv[1:]))
