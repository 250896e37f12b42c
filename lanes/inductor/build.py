"""The build: `torch.compile` of the region's function, in a process of its own, timed.

Dynamo and Inductor compile on the first call, so the build makes that call on random inputs
of the region's shapes and records how long it took (what a user waits for on their first
call) as the artifact's compile seconds. A process per build keeps torch out of the arbiter's
own process, lets builds run side by side, and turns a compiler that fails, crashes or hangs
into a `BuildError` with its log. What it compiled stays in Inductor's cache folder, beside
the build cache, where the trial worker's compile of the same function finds it.

Run as `python -m arbiter.lanes.inductor.build REQUEST.json ARTIFACT.json`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from arbiter.lane import (
    Artifact,
    BuildError,
    Config,
    KernelSource,
    build_key,
    cached_build,
    input_shapes,
    run_tool,
    settings,
)
from arbiter.region import region_from_canonical  # (public; arbiter.lane could re-export it)

from .._torch_region import region_of

__all__ = ["build", "inductor_cache"]

TIMEOUT = 900.0  # seconds: max-autotune benchmarks every GEMM choice on a GPU


def inductor_cache() -> Path:
    """Inductor's cache folder: beside the build cache, so both are private to this user and
    are cleared together."""
    return settings().cache_dir / "inductor"


def build(source: KernelSource, device: str, compiler: str, arch: str) -> Artifact:
    """Compile through the build cache; a cached artifact reports no compile seconds (as every
    lane's does), the records of its first build hold them."""
    key = build_key(source=source.text, compiler=compiler, flags=(), arch=f"{device} {arch}",
                    lane=f"{source.lane}")

    def compile_in_child(tmp: Path, target: Path) -> tuple[int, str]:
        folder = inductor_cache()
        folder.mkdir(mode=0o700, exist_ok=True)
        request = tmp / "request.json"
        request.write_text(json.dumps({"source": source.text, "config": source.config.as_dict(),
                                       "device": device, "inductor_cache": str(folder)}))
        return run_tool([sys.executable, "-m", __name__, str(request), str(target)],
                        timeout=TIMEOUT)

    path, _, cached, log = cached_build(key, ".json", compile_in_child)
    try:
        made = json.loads(path.read_text())
        seconds = float(made["compile_seconds"])
    except (OSError, ValueError, KeyError) as e:
        raise BuildError(f"{path}: not an inductor build record ({e})", log) from e
    return Artifact(source.lane, key, source, str(path), 0.0 if cached else seconds, cached, log)


def main(argv: list[str]) -> int:
    request, target = (Path(a) for a in argv)
    req = json.loads(request.read_text())
    region = region_from_canonical(region_of(req["source"]))
    config = Config.of(req["config"])
    device = req["device"]

    from .._torch_region import storage_dtype, torch_module
    from .run import compiled

    fn = compiled(region, config, device, req["inductor_cache"], compile_pool=device != "cpu")
    torch = torch_module()
    dtype = storage_dtype(region.dtype)
    tensors = {n: torch.randn(shape, dtype=dtype, device=device)
               for n, shape in input_shapes(region).items()}
    t0 = time.perf_counter()
    fn(tensors)
    if device != "cpu":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    target.write_text(json.dumps({
        "compile_seconds": seconds, "torch": torch.__version__, "device": device,
        "config": config.as_dict(), "inductor_cache": req["inductor_cache"]}) + "\n")
    print(f"inductor: compiled on the first call in {seconds:.2f} s "
          f"(torch {torch.__version__}, {device}, {config})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
