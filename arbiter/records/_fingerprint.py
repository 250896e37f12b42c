"""What makes a measurement belong to this machine: CPU (its model and how many of them this
process may use), GPU, compilers, libraries, arbiter.

Cheap by design (it runs at the start of every `tune`/`best`/`run`): version queries run
concurrently, torch is looked up by its installed metadata, never imported. A record made
under another fingerprint is evidence, not truth: its winner is re-verified here first.
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from ..lane import run_tool, usable_cores, version_text
from ..settings import settings

__all__ = ["Fingerprint", "fingerprint"]

COMPILERS = ("clang++-19", "hipcc", "nvcc")
LIBRARIES = ("numpy", "torch")


class Fingerprint(dict):
    """The details (a plain JSON-able dict) plus `.hash`, a stable 16-hex digest of them."""

    @property
    def hash(self) -> str:
        text = json.dumps(self, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia() -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    rc, out = run_tool(["nvidia-smi", "--query-gpu=name,compute_cap,driver_version",
                        "--format=csv,noheader"], timeout=20)
    return [ln.strip() for ln in out.splitlines() if ln.strip()] if rc == 0 else []


def _rocm() -> list[str]:
    if shutil.which("rocminfo") is None:
        return []
    rc, out = run_tool(["rocminfo"], timeout=20)
    if rc != 0:
        return []
    return sorted({ln.split(":", 1)[1].strip() for ln in out.splitlines()
                   if ln.strip().startswith("Name:") and "gfx" in ln})


def _compiler_version(compiler: str) -> str | None:
    """The line that names the version (nvcc prints it last), or None when not installed."""
    found = version_text(compiler)
    if found is None:
        return None
    _, _, out = found
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    named = [ln for ln in lines if "version" in ln.lower() or "release" in ln.lower()]
    return (named or lines or ["?"])[0]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=4)
def _details(cc: str, cpus: int, gfx11_emulation: bool,
             triton_interpret: bool) -> Fingerprint:
    from .. import __version__

    compilers = (cc, *COMPILERS)
    with ThreadPoolExecutor(max_workers=len(compilers) + 2) as pool:
        versions = dict(zip(compilers, pool.map(_compiler_version, compilers)))
        nvidia, rocm = pool.submit(_nvidia), pool.submit(_rocm)
        gpus = {"nvidia": nvidia.result(), "rocm": rocm.result()}
    details: dict[str, Any] = {
        "arbiter": __version__,
        "machine": platform.machine(),
        "system": platform.system(),
        "cpu": _cpu_model(),
        # a CPU lane's latency (and its thread counts) depend on the CPUs this process may use:
        # a sweep under `taskset` or a smaller CPU set is another environment
        "usable_cpus": cpus,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "gpu": {k: v for k, v in gpus.items() if v},
        "compilers": {c: v for c, v in versions.items() if v},
        "libraries": {d: v for d in LIBRARIES if (v := _version(d))},
    }
    if gfx11_emulation:  # gfx11 code paths emulated on NVIDIA: slow, never mixed with real ones
        details["gfx11_emulation"] = True
    if triton_interpret:  # the triton lane in Triton's interpreter on the CPU: correctness only
        details["triton_interpret"] = True
    return Fingerprint(details)


_ONCE = threading.Lock()  # a second caller waits for the first one's answer


def fingerprint(cpus: int | None = None) -> Fingerprint:
    """This machine's fingerprint (computed once per process, again if its CPU set changes);
    `cpus`: that of a process of this machine allowed that many CPUs (a worker it starts)."""
    with _ONCE:
        s = settings()
        return _details(s.cc, cpus or usable_cores(), s.gfx11_emulation, s.triton_interpret)
