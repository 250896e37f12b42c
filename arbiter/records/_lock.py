"""One sweep at a time on a SQLite file.

SQLite takes one writer, and two sweeps of one region started side by side would each measure
the candidates the other is measuring (each plans from the records as they were when it
started). A second sweep waits for the first to end instead (saying so on stderr), then plans
from its records.

The lock belongs to the file, not to a name of it: an open-file-description lock (Linux
`F_OFD_SETLK`; `flock` elsewhere) on one byte of the database file itself, past the bytes
SQLite locks, so a symlink or another mount of the same file meets it (a file with several
hard links is refused before: `one_name`), and no
file is made beside the database (none whose name another user could point elsewhere).
The descriptor it is taken on stays open for the life of the process: closing any descriptor
of a file drops every POSIX lock the process holds on it, SQLite's own among them. Other
databases (PostgreSQL) are not locked here.
"""

from __future__ import annotations

import contextlib
import errno
import os
import struct
import sys
import threading
from collections.abc import Iterator

from ._session import one_name, sqlite_path

try:
    import fcntl
except ImportError:  # not a POSIX system: no lock
    fcntl = None  # type: ignore[assignment]

__all__ = ["one_sweep"]

# SQLite locks the bytes from PENDING_BYTE (0x40000000) to PENDING_BYTE + 511; this one is
# past them, so the sweep lock never meets a lock SQLite takes (nor one of another host's,
# on NFS, where the byte-range locks reach the server).
LOCK_BYTE = 0x40000000 + 4096
_OFD = (fcntl is not None and sys.platform.startswith("linux")
        and hasattr(fcntl, "F_OFD_SETLKW") and struct.calcsize("P") == 8)

_FDS: dict[tuple[int, int], int] = {}  # (device, inode) -> a descriptor never closed
_THREADS: dict[tuple[int, int], threading.Lock] = {}  # sweeps of this process, one at a time
_GUARD = threading.Lock()


@contextlib.contextmanager
def one_sweep(url: str) -> Iterator[None]:
    path = sqlite_path(url)
    one_name(path, url)  # (refused before it waits for a sweep through another name)
    held = None if path is None or fcntl is None else _acquire(path, url)
    try:
        yield
    finally:
        if held is not None:
            fd, in_process = held
            with contextlib.suppress(OSError):
                _lock(fd, fcntl.F_UNLCK if _OFD else fcntl.LOCK_UN, wait=False)
            in_process.release()


def _descriptor(path: str) -> tuple[int, tuple[int, int]] | None:
    """This process's descriptor of the file at `path` (made when the file is new), and the
    file's identity; None where it cannot be opened for writing (the database's own errors
    say why once it is opened)."""
    try:
        st = os.stat(path)
        ident = (st.st_dev, st.st_ino)
        with _GUARD:
            if ident in _FDS:
                return _FDS[ident], ident
    except OSError:
        pass
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None
    st = os.fstat(fd)
    ident = (st.st_dev, st.st_ino)
    with _GUARD:  # a descriptor opened twice is kept too: closing it would drop locks
        _FDS.setdefault(ident, fd)
        return _FDS[ident], ident


def _lock(fd: int, how: int, *, wait: bool) -> bool:
    """Take (or with F_UNLCK / LOCK_UN let go) the sweep lock on `fd`; False when another
    holds it and `wait` is False."""
    try:
        if _OFD:
            cmd = fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK
            # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for an OFD lock)
            fcntl.fcntl(fd, cmd, struct.pack("hhqqi4x", how, os.SEEK_SET, LOCK_BYTE, 1, 0))
        else:
            fcntl.flock(fd, how | (0 if wait else fcntl.LOCK_NB))
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise
    return True


def _acquire(path: str, url: str) -> tuple[int, threading.Lock] | None:
    """The locked descriptor and this process's lock of the file; None where no lock can be
    taken (a file that cannot be opened for writing, a file system without locks)."""
    found = _descriptor(path)
    if found is None:
        return None
    fd, ident = found
    with _GUARD:
        in_process = _THREADS.setdefault(ident, threading.Lock())
    exclusive = fcntl.F_WRLCK if _OFD else fcntl.LOCK_EX
    told = False

    def tell() -> None:
        nonlocal told
        if not told:
            print(f"arbiter: another sweep is writing to {url}: waiting for it to end (SQLite "
                  "takes one writer at a time)", file=sys.stderr, flush=True)
            told = True

    if not in_process.acquire(blocking=False):
        tell()
        in_process.acquire()
    try:
        if not _lock(fd, exclusive, wait=False):
            tell()
            _lock(fd, exclusive, wait=True)
    except OSError:  # no locks on this file system (ENOLCK): none taken
        in_process.release()
        return None
    except BaseException:
        in_process.release()
        raise
    return fd, in_process
