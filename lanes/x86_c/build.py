"""gcc through the shared content-hash build cache."""

from __future__ import annotations

import platform
from functools import cache
from pathlib import Path

from arbiter.lane import (
    Artifact,
    BuildError,
    KernelSource,
    build_key,
    cached_build,
    compiler_identity,
    run_tool,
    settings,
)

__all__ = ["BASE_FLAGS", "build", "native_arch"]

BASE_FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=gnu11")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def native_arch(cc: str) -> str:
    """What -march=native means here (resolved arch + CPU model): part of every build key,
    so a cache shared between machines never hands one CPU another's binary."""
    rc, out = run_tool([cc, "-march=native", "-Q", "--help=target"], timeout=60)
    resolved = "?"
    for line in out.splitlines():
        s = line.strip()
        if s.startswith("-march="):
            resolved = s.split()[-1]
            break
    return f"{resolved}|{_cpu_model()}|{platform.machine()}"


def build(source: KernelSource, lane_version: str) -> Artifact:
    cc = settings().cc
    flags = (*BASE_FLAGS, *source.options)
    key = build_key(source=source.text, compiler=cc, flags=flags, arch=native_arch(cc),
                    lane=f"{source.lane}-{lane_version}")

    def compile_to(tmp: Path, target: Path) -> tuple[int, str]:
        src = tmp / "kernel.c"
        src.write_text(source.text)
        return run_tool([cc, *flags, str(src), "-o", str(target)], cwd=str(tmp))

    path, seconds, cached, log = cached_build(key, ".so", compile_to)
    return Artifact(source.lane, key, source, str(path), seconds, cached, log)


PROBE = "#include <omp.h>\nint f(void) { return omp_get_max_threads(); }\n"


@cache
def probe(cc: str) -> tuple[bool, str]:
    """Can `cc` build an OpenMP shared object here? Compiled once per compiler and CPU, then a
    build-cache lookup (every `tune`, `best` and `run` asks)."""
    ident = compiler_identity(cc)
    if not ident:
        return False, f"C compiler {cc!r} not found (set ARBITER_CC)"
    key = build_key(source=PROBE, compiler=cc, flags=BASE_FLAGS, arch=_cpu_model(),
                    lane="x86_c-probe")

    def compile_to(tmp: Path, target: Path) -> tuple[int, str]:
        src = tmp / "probe.c"
        src.write_text(PROBE)
        return run_tool([cc, *BASE_FLAGS, str(src), "-o", str(target)], timeout=60)

    try:
        cached_build(key, ".so", compile_to)
    except BuildError as e:
        return False, f"{cc} cannot build OpenMP shared objects: {e.log.strip()[:200]}"
    except OSError as e:  # no kernel could be cached either
        return False, f"build cache {settings().cache_dir} not writable: {e}"
    return True, ident.split("|", 1)[1]
