"""The content-hash build cache and compiler invocation every compiling lane uses.

Everything that changes the binary goes into `build_key`: source text, compiler path and
version line, flags, target arch, lane name and version. A build happens in a temporary
directory and is moved into the cache atomically, so a crash mid-build never leaves a
half-written library under a valid key.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path

from .._errors import BuildError
from ..settings import settings

__all__ = ["build_key", "cached_build", "compiler_identity", "run_tool", "version_text"]


def _kill_group(p: subprocess.Popen[str]) -> None:
    # the compiler driver's own children (cc1, as, ld) are in its group
    if p.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)


def run_tool(argv: Sequence[str], timeout: float = 300.0,
             cwd: str | None = None) -> tuple[int, str]:
    """Run a compiler (never through a shell); returns (exit code, combined output).

    The tool leads a process group of its own, killed whole on timeout or interrupt."""
    try:
        p = subprocess.Popen(list(argv), cwd=cwd, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    except FileNotFoundError:
        return 127, f"{argv[0]}: not found"
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(p)
        p.communicate()
        return 124, f"{argv[0]}: timed out after {timeout:.0f}s"
    except BaseException:
        _kill_group(p)
        p.wait()
        raise
    return p.returncode, out + err


@cache
def version_text(compiler: str) -> tuple[str, int, str] | None:
    """(resolved path, exit code, output) of `compiler --version`, asked once per process;
    None when it is not installed. The build keys and the fingerprint both read it."""
    path = shutil.which(compiler)
    if path is None:
        return None
    rc, out = run_tool([path, "--version"], timeout=30)
    return path, rc, out


def compiler_identity(compiler: str) -> str:
    """Resolved path plus first version line: part of every build key."""
    found = version_text(compiler)
    if found is None:
        return ""
    path, rc, out = found
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return f"{path}|{lines[0] if lines else rc}"


def build_key(*, source: str, compiler: str, flags: Sequence[str], arch: str, lane: str) -> str:
    h = hashlib.sha256()
    for part in (lane, compiler_identity(compiler), arch, "\0".join(flags), source):
        h.update(part.encode())
        h.update(b"\0\1")
    return h.hexdigest()


def cached_build(
    key: str, suffix: str, build: Callable[[Path, Path], tuple[int, str]]
) -> tuple[Path, float, bool, str]:
    """Return (path, compile seconds, was cached, log) for the artifact under `key`.

    `build(tmpdir, target)` must write `target` and return (exit code, log); a non-zero code
    raises `BuildError` carrying the log.
    """
    final = settings().cache_dir / key[:2] / f"{key}{suffix}"
    if final.exists():
        return final, 0.0, True, ""
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="arbiter-build-", dir=final.parent) as tmp:
        target = Path(tmp) / f"out{suffix}"
        t0 = time.perf_counter()
        rc, log = build(Path(tmp), target)
        seconds = time.perf_counter() - t0
        if rc != 0 or not target.exists():
            raise BuildError(f"compile failed (exit {rc})", log)
        os.replace(target, final)
    return final, seconds, False, log
