"""Files written whole or not at all: `arbiter run --output`, `export --out`, the report."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["whole_file"]


@contextlib.contextmanager
def whole_file(path: str | Path, mode: str = "wb") -> Iterator[IO[Any]]:
    """A new file beside `path` for the block to write (`mode` "wb" or "w"), moved over
    `path` when the block ends and removed when it raises: a full disk, a kill or an error
    mid-write leaves the file that was there (or none), never one cut short.

    The new file is made exclusively under a random name (a link planted beside `path` is
    never followed) with the permissions `open` gives (0666 less the umask), and is on disk
    before it takes the name."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    for _ in range(8):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.part")
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"{path}: no free name beside it to write to")
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
