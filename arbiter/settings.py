"""Typed settings read from ARBITER_* environment variables, in one place.

Read fresh on every call (`settings()`), so worker processes and tests see the same values;
`override(...)` sets them for a `with` block (tests).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Settings", "override", "settings"]

_ENV = {
    "cache_dir": "ARBITER_CACHE_DIR",
    "db": "ARBITER_DB",
    "rocm_arch": "ARBITER_ROCM_ARCH",
    "cuda_arch": "ARBITER_CUDA_ARCH",
    "extra_lanes": "ARBITER_EXTRA_LANES",
    "cc": "ARBITER_CC",
    "worker_memory": "ARBITER_WORKER_MEMORY",
    "gfx11_emulation": "ARBITER_GFX11_EMULATION",
    "triton_interpret": "ARBITER_TRITON_INTERPRET",
}


@dataclass(frozen=True)
class Settings:
    cache_dir: Path
    db: str
    rocm_arch: str | None
    cuda_arch: str | None
    extra_lanes: str  # "name=module:attr,..." lanes registered without an entry point
    cc: str
    worker_memory: str  # "" (the default limit), "8G", "50%" (of this machine's), "0" (none)
    gfx11_emulation: bool  # GPU lanes run their gfx11 code paths on an NVIDIA GPU (slow)
    triton_interpret: bool  # the triton lane runs in Triton's interpreter on the CPU (slow)


def _default_cache_dir() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("arbiter")) / "build"


def settings() -> Settings:
    """The settings the environment holds now."""
    env = {k: os.environ.get(v) or None for k, v in _ENV.items()}
    return Settings(
        cache_dir=Path(env["cache_dir"]) if env["cache_dir"] else _default_cache_dir(),
        db=env["db"] or "sqlite:///arbiter.db",
        rocm_arch=env["rocm_arch"],
        cuda_arch=env["cuda_arch"],
        extra_lanes=env["extra_lanes"] or "",
        cc=env["cc"] or "gcc",
        worker_memory=env["worker_memory"] or "",
        gfx11_emulation=_flag(env["gfx11_emulation"]),
        triton_interpret=_flag(env["triton_interpret"]),
    )


def _flag(value: str | None) -> bool:
    return (value or "0") not in ("0", "false", "no", "off")


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
