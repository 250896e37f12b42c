"""The content-hash build cache and compiler invocation every compiling lane uses.

Everything that changes the binary goes into `build_key`: source text, compiler path and
version line, flags, target arch, lane name and version. A build happens in a temporary
directory and is moved into the cache atomically, so a crash mid-build never leaves a
half-written library under a valid key.

What the cache holds is loaded into the worker, constructors and all, so it trusts nothing it
did not make: the cache folder is private to its user (made 0700; one owned by another user
or writable by others is refused), and each artifact is checked against the SHA-256 digest
recorded beside it when it was built, before it is used and again before it is loaded; one
that fails (truncated, replaced, planted without a digest) is built again. A build leaves no
temporary folder behind, even killed: a folder whose build is gone is removed by the next
process that builds there.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from pathlib import Path

from .._errors import BuildError, CacheError
from ..settings import settings

__all__ = ["artifact_mismatch", "build_key", "cache_root", "cached_build", "compiler_identity",
           "run_tool", "version_text"]

_TMP_PREFIX = "arbiter-build-"
_DIGEST = ".sha256"  # beside each artifact: the hex digest of its bytes as built
_STALE_AFTER = 60.0  # seconds: an unlocked build folder this old has lost its builder
_SWEPT: set[str] = set()  # caches whose stale build folders this process removed


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


def _private_dir(path: Path) -> None:
    """Make `path` and any missing parent, each 0700 whatever the umask."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, 0o700)
            os.chmod(d, 0o700)  # (mkdir's mode passes through the umask)


def cache_root() -> Path:
    """The build cache folder, made private to this user when new. One owned by another
    user, or that others may write, is refused (CacheError): whoever can write it can have
    their code loaded by the next sweep."""
    root = settings().cache_dir
    _private_dir(root)
    st = os.stat(root)
    if st.st_uid != os.geteuid():
        raise CacheError(f"build cache {root} belongs to another user (uid {st.st_uid}): "
                         "nothing in it is loaded; set ARBITER_CACHE_DIR to a folder of your own")
    if st.st_mode & 0o022:
        raise CacheError(f"build cache {root} is writable by others (mode "
                         f"{st.st_mode & 0o777:o}): anyone could plant a library in it; "
                         f"remove it, or `chmod 700 {root}` if you trust what it holds")
    if st.st_mode & 0o077:
        os.chmod(root, 0o700)  # (readable by others: made private)
    _sweep_stale(str(root))
    return root


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def _shard(folder: Path, how: int) -> Iterator[None]:
    """`folder` of the cache locked (`flock`), shared to read an artifact and its digest,
    exclusive to put or remove the pair: a reader never sees one process's artifact beside
    another's digest."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, how)
        yield
    finally:
        os.close(fd)


def artifact_mismatch(path: str | Path) -> str | None:
    """Why the cached artifact at `path` is not what was built there (None: it is, or it is
    not in the build cache): no digest recorded beside it, or bytes that no longer match."""
    p = Path(path)
    try:
        if not p.resolve().is_relative_to(settings().cache_dir.resolve()):
            return None
        with _shard(p.parent, fcntl.LOCK_SH):
            recorded = p.with_name(p.name + _DIGEST).read_text().strip()
            actual = _digest(p)
    except FileNotFoundError as e:
        missing = e.filename == f"{p}{_DIGEST}"
        return f"{p}: {'no digest recorded when it was built' if missing else 'not there'}"
    except OSError as e:
        return f"{p}: cannot be read ({e.strerror or e})"
    if actual != recorded:
        return f"{p}: its bytes do not match the digest recorded when it was built"
    return None


def _sweep_stale(root: str) -> None:
    """Remove the temporary folders of builds that are gone (a process killed mid-build), in
    every shard of the cache; once per process and cache."""
    if root in _SWEPT:
        return
    _SWEPT.add(root)
    with contextlib.suppress(OSError), os.scandir(root) as shards:
        for shard in shards:
            if shard.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError), os.scandir(shard.path) as entries:
                    for e in entries:
                        if e.name.startswith(_TMP_PREFIX) and e.is_dir(follow_symlinks=False):
                            _remove_if_stale(e.path)


def _remove_if_stale(folder: str) -> None:
    """A build folder is live while its builder holds its lock; a new one may not be locked
    yet, so only one older than `_STALE_AFTER` is taken for dead."""
    try:
        if time.time() - os.stat(folder).st_mtime < _STALE_AFTER:
            return
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)  # (being built)
        return
    try:
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _build_folder(parent: Path) -> Iterator[Path]:
    """A temporary folder in `parent`, locked for as long as the build runs (so another
    process can tell it from a dead build's), removed after it."""
    tmp = tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=parent)
    fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield Path(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        os.close(fd)


def cached_build(
    key: str, suffix: str, build: Callable[[Path, Path], tuple[int, str]]
) -> tuple[Path, float, bool, str]:
    """Return (path, compile seconds, was cached, log) for the artifact under `key`.

    `build(tmpdir, target)` must write `target` and return (exit code, log); a non-zero code
    raises `BuildError` carrying the log. A cached artifact that fails its digest is built
    again (the log says so).
    """
    final = cache_root() / key[:2] / f"{key}{suffix}"
    note = ""
    if final.exists():
        wrong = artifact_mismatch(final)
        if wrong is None:
            return final, 0.0, True, ""
        note = f"{wrong}: built again\n"
    _private_dir(final.parent)
    with _build_folder(final.parent) as tmp:
        target = tmp / f"out{suffix}"
        t0 = time.perf_counter()
        rc, log = build(tmp, target)
        seconds = time.perf_counter() - t0
        if rc != 0 or not target.exists():
            raise BuildError(f"compile failed (exit {rc})", log)
        os.chmod(target, os.stat(target).st_mode & 0o700)
        digest = tmp / f"out{suffix}{_DIGEST}"
        digest.write_text(_digest(target) + "\n")
        os.chmod(digest, 0o600)
        with _shard(final.parent, fcntl.LOCK_EX):
            # the digest first: a crash between the two leaves a mismatch, built again
            os.replace(digest, final.with_name(final.name + _DIGEST))
            os.replace(target, final)
    return final, seconds, False, note + log
