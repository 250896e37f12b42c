"""Content-hash build cache and compiler invocation shared by every compiling lane.

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
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from pathlib import Path

from ._errors import BuildError
from ._settings import settings

__all__ = ["NotBuilt", "build_key", "cached_build", "compiler_identity", "kill_tools_of",
           "lookup_only", "run_tool", "stop_tools", "version_text"]


class NotBuilt(Exception):
    """Not in the build cache, and `lookup_only` forbids compiling it."""


_LOOKUP = threading.local()


@contextlib.contextmanager
def lookup_only() -> Iterator[None]:
    """In this block, `cached_build` (in this thread) finds an artifact or raises `NotBuilt`,
    as does `run_tool` for a candidate's compile: nothing is compiled."""
    before = getattr(_LOOKUP, "only", False)
    _LOOKUP.only = True
    try:
        yield
    finally:
        _LOOKUP.only = before


# The compiler each thread is running, so that another thread can stop it (the worker's build
# of a candidate asked ahead, when another candidate comes instead); threads told to stop.
_TOOLS: dict[int, subprocess.Popen[str]] = {}
_STOPPED: set[int] = set()
_TOOLS_LOCK = threading.Lock()


def _kill_group(p: subprocess.Popen[str]) -> None:
    # the compiler driver's own children (cc1, as, ld) are in its group
    if p.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, signal.SIGKILL)


def run_tool(
    argv: Sequence[str], timeout: float = 300.0, cwd: str | None = None, *,
    stoppable: bool = False,
) -> tuple[int, str]:
    """Run a compiler (never through a shell); returns (exit code, combined output).

    The tool leads a process group of its own, killed whole on timeout or interrupt.
    `stoppable`: a candidate's compile, which `stop_tools` may end (never a probe whose
    answer is cached)."""
    me = threading.get_ident()
    if stoppable and getattr(_LOOKUP, "only", False):
        raise NotBuilt(argv[0])
    try:
        with _TOOLS_LOCK:
            if stoppable and me in _STOPPED:
                return 125, f"{argv[0]}: not started, the build was stopped"
            p = subprocess.Popen(list(argv), cwd=cwd, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, start_new_session=True)
            if stoppable:
                _TOOLS[me] = p
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
    finally:
        if stoppable:
            with _TOOLS_LOCK:
                _TOOLS.pop(me, None)
    return p.returncode, out + err


def stop_tools(thread: int) -> None:
    """Kill the compile `thread` is running and let it start no other: its build is not
    wanted."""
    with _TOOLS_LOCK:
        _STOPPED.add(thread)
        p = _TOOLS.get(thread)
        if p is not None:
            _kill_group(p)


def forget_stopped(thread: int) -> None:
    with _TOOLS_LOCK:
        _STOPPED.discard(thread)


def kill_tools_of(pid: int) -> None:
    """Kill the tools process `pid` started (stop `pid` first): they lead groups of their own,
    so they would outlive it."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        child = int(text[:text.index(" ")])
        ppid, group = text[text.rindex(")") + 2:].split()[1:3]
        if int(ppid) == pid and int(group) == child:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child, signal.SIGKILL)


@cache
def version_text(compiler: str) -> tuple[str, int, str] | None:
    """(resolved path, exit code, output) of `compiler --version`, asked once per process
    (twice at most, if two threads race to it); None when it is not installed. The build keys
    and the fingerprint both read it."""
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
    root = settings().cache_dir
    final = root / key[:2] / f"{key}{suffix}"
    if final.exists():
        return final, 0.0, True, ""
    if getattr(_LOOKUP, "only", False):
        raise NotBuilt(key)
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
