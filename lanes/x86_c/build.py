"""gcc through the shared content-hash build cache."""

from __future__ import annotations

import platform
import tempfile
from functools import cache
from pathlib import Path

from arbiter._build import build_key, cached_build, compiler_identity, run_tool
from arbiter._settings import settings
from arbiter._values import Artifact, KernelSource

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


@cache
def probe(cc: str) -> tuple[bool, str]:
    """Can `cc` build an OpenMP shared object here? (once per process)"""
    ident = compiler_identity(cc)
    if not ident:
        return False, f"C compiler {cc!r} not found (set ARBITER_CC)"
    with tempfile.TemporaryDirectory(prefix="arbiter-probe-") as tmp:
        src = Path(tmp) / "probe.c"
        src.write_text("#include <omp.h>\nint f(void) { return omp_get_max_threads(); }\n")
        rc, log = run_tool([cc, *BASE_FLAGS, str(src), "-o", str(Path(tmp) / "probe.so")],
                           timeout=60)
    if rc != 0:
        return False, f"{cc} cannot build OpenMP shared objects: {log.strip()[:200]}"
    return True, ident.split("|", 1)[1]
