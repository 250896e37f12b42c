"""Typed settings read from ARBITER_* environment variables, in one place.

Read fresh on every call (`settings()`), so worker processes and tests see the same values;
`override(...)` sets them for a `with` block (tests).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["Settings", "override", "settings"]

_ENV = {
    "cache_dir": "ARBITER_CACHE_DIR",
    "db": "ARBITER_DB",
    "rocm_arch": "ARBITER_ROCM_ARCH",
    "cuda_arch": "ARBITER_CUDA_ARCH",
    "extra_lanes": "ARBITER_EXTRA_LANES",
    "cc": "ARBITER_CC",
}
# what a Settings is made from: the variables above, and those the default cache dir is found by
_READ = (*_ENV.values(), "XDG_CACHE_HOME", "HOME")


@dataclass(frozen=True)
class Settings:
    cache_dir: Path
    db: str
    rocm_arch: str | None
    cuda_arch: str | None
    extra_lanes: str  # "name=module:attr,..." lanes registered without an entry point (tests)
    cc: str


def _default_cache_dir() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("arbiter")) / "build"


# the variables' names as `os.environ` stores them (encoded, on POSIX)
_READ_ENCODED = tuple(map(os.fsencode, _READ))


def encoded_environ() -> dict[bytes, bytes] | None:
    """`os.environ`'s own store, encoded as the OS holds it (POSIX), else None: reading it
    skips decoding every variable read."""
    data = getattr(os.environ, "_data", None)
    return data if isinstance(data, dict) and os.name == "posix" else None


def settings() -> Settings:
    """The settings the environment holds now. A worker asks many times a check, so each
    distinct environment's are made once (the default cache dir alone took ~40 us a call),
    looked up by the variables' encoded values: decoding eight of them took ~20 us a call on
    2 busy cores, this ~2."""
    data = encoded_environ()
    if data is not None:
        return _made_encoded(tuple(map(data.get, _READ_ENCODED)))
    return _made(tuple(map(os.environ.get, _READ)))


@lru_cache(maxsize=16)
def _made_encoded(values: tuple[bytes | None, ...]) -> Settings:
    return _made(tuple(None if v is None else os.fsdecode(v) for v in values))


@lru_cache(maxsize=16)
def _made(values: tuple[str | None, ...]) -> Settings:
    env = dict(zip(_READ, values))
    cache = env[_ENV["cache_dir"]]
    return Settings(
        cache_dir=Path(cache) if cache else _default_cache_dir(),
        db=env[_ENV["db"]] or "sqlite:///arbiter.db",
        rocm_arch=env[_ENV["rocm_arch"]] or None,
        cuda_arch=env[_ENV["cuda_arch"]] or None,
        extra_lanes=env[_ENV["extra_lanes"]] or "",
        cc=env[_ENV["cc"]] or "gcc",
    )


@contextlib.contextmanager
def override(**values: object) -> Iterator[None]:
    """Set settings for the duration of a block; None removes the variable."""
    unknown = set(values) - set(_ENV)
    if unknown:
        raise KeyError(f"unknown settings: {sorted(unknown)}")
    saved = {k: os.environ.get(_ENV[k]) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(_ENV[k], None)
            else:
                os.environ[_ENV[k]] = str(v)
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(_ENV[k], None)
            else:
                os.environ[_ENV[k]] = old
