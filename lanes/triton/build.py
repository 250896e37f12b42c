"""The build: the candidate's launches compiled ahead of time for the GPU's arch (`aot.py`), in
a process of its own, through the build cache. It proves the kernels compile for the device,
times the compile, and reads what each uses (shared memory; on gfx targets VGPRs, SGPRs, LDS,
scratch); a kernel needing more shared memory than the GPU gives a block fails here, not at
launch. The runner launches the same templates through Triton's JIT, which compiles them
again on the first call (untimed) into Triton's own cache.

Under Triton's interpreter nothing is compiled: the artifact says so.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from arbiter.lane import Artifact, BuildError, KernelSource, build_key, cached_build, run_tool

from .._torch_region import region_of

__all__ = ["build"]

TIMEOUT = 600.0  # seconds: a few kernels through Triton's MLIR and LLVM pipelines


def build(source: KernelSource, arch: str | None, shared_limit: int, identity: str) -> Artifact:
    """Compile for `arch` (None: the interpreter, nothing to compile); `shared_limit`: bytes of
    shared memory a block may use on the GPU (0: unknown, not checked)."""
    key = build_key(source=source.text, compiler="", flags=(), arch=arch or "interpreter",
                    lane=f"{source.lane} {identity}")
    if arch is None:
        return Artifact(source.lane, key, source, None, 0.0, True,
                        "Triton interpreter: nothing compiled before the run")

    def compile_in_child(tmp: Path, target: Path) -> tuple[int, str]:
        request = tmp / "request.json"
        request.write_text(json.dumps({"region": region_of(source.text), "arch": arch,
                                       "config": source.config.as_dict()}))
        return run_tool([sys.executable, "-m", "arbiter.lanes.triton.aot", str(request),
                         str(target)], timeout=TIMEOUT)

    path, _, cached, log = cached_build(key, ".json", compile_in_child)
    try:
        made = json.loads(path.read_text())
        seconds = float(made["compile_seconds"])
        kernels = list(made["kernels"])
    except (OSError, ValueError, KeyError) as e:
        raise BuildError(f"{path}: not a triton build record ({e})", log) from e
    over = [f"{k['kernel']} needs {k['shared']} bytes of shared memory, a block gets "
            f"{shared_limit} on this GPU" for k in kernels if shared_limit and
            k["shared"] > shared_limit]
    if over:
        raise BuildError("; ".join(over), log)
    resources = made.get("resources") or {
        "arch": arch, "shared": max((k["shared"] for k in kernels), default=0),
        "kernels": [{"name": k["kernel"], "shared": k["shared"]} for k in kernels]}
    return Artifact(source.lane, key, source, str(path), 0.0 if cached else seconds, cached, log,
                    resources=resources)
