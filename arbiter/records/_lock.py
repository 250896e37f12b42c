"""One sweep at a time on a SQLite file.

SQLite takes one writer, and two sweeps of one region started side by side would each measure
the candidates the other is measuring (each plans from the records as they were when it
started). A second sweep waits for the first to end instead (saying so on stderr), then plans
from its records. The lock is `flock` on a file beside the database (never the database
itself: closing any descriptor of that file would drop SQLite's own POSIX locks), removed when
the sweep ends; other databases (PostgreSQL) are not locked here.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

from ._session import sqlite_path

try:
    import fcntl
except ImportError:  # not a POSIX system: no lock
    fcntl = None  # type: ignore[assignment]

__all__ = ["one_sweep"]


@contextlib.contextmanager
def one_sweep(url: str) -> Iterator[None]:
    path = sqlite_path(url)
    fd = None if path is None or fcntl is None else _acquire(path + ".lock", url)
    try:
        yield
    finally:
        if fd is not None:
            assert path is not None
            with contextlib.suppress(OSError):
                os.unlink(path + ".lock")  # (before the unlock: see `_acquire`)
            os.close(fd)


def _acquire(lock: str, url: str) -> int | None:
    """The locked descriptor; None where no lock file can be made (the database's own errors
    say why, once it is opened)."""
    while True:
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip()
                who = f" (pid {holder})" if holder.isdigit() else ""
                print(f"arbiter: another sweep{who} is writing to {url}: waiting for it to "
                      "end (SQLite takes one writer at a time)", file=sys.stderr, flush=True)
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # no locks on this file system (ENOLCK): none taken
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        try:
            same = os.fstat(fd).st_ino == os.stat(lock).st_ino
        except OSError:
            same = False
        if same:  # else: locked after its holder removed it; a new one is made
            with contextlib.suppress(OSError):  # (the pid is only for the message)
                os.ftruncate(fd, 0)
                os.write(fd, str(os.getpid()).encode())
            return fd
        os.close(fd)
