"""numpy as a lane like any other, so a CPU winner is never slower than the library.

It computes in float32 exactly as a user would write it eagerly (`run.py`), from any storage
dtype (16-bit inputs are widened first, the result rounded to the storage dtype). numpy itself is
imported by its runner only: the trial worker's first compiles start before numpy is loaded.
"""

from __future__ import annotations

import sys
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from arbiter.lane import Artifact, Availability, Config, KernelSource, Platform, Region, Space

if TYPE_CHECKING:
    from .run import NumpyRunner


@cache
def _numpy_version() -> str | None:
    # numpy's own when it is loaded; else its metadata (a scan of the installed packages, but
    # no import), then an import for a numpy installed without metadata
    loaded = sys.modules.get("numpy")
    if loaded is not None:
        return str(loaded.__version__)
    try:
        return version("numpy")
    except PackageNotFoundError:
        try:
            import numpy
        except ImportError:
            return None
        return str(numpy.__version__)


class NumpyLane:
    name = "numpy"
    platform = Platform.CPU
    precisions = ("f32",)
    dtypes = ("f32", "f16", "bf16")
    version = "1"

    def available(self) -> Availability:
        v = _numpy_version()
        return Availability(v is not None, f"numpy {v}" if v else "numpy is not installed")

    def applies_to(self, region: Region) -> str | None:
        return None

    def space(self, region: Region) -> Space:
        return Space()

    def emit(self, region: Region, config: Config) -> KernelSource:
        text = f"# numpy eager float32: {region.describe()}\n"
        return KernelSource(self.name, region.key, config, "python", text)

    def build(self, source: KernelSource) -> Artifact:
        return Artifact(self.name, f"numpy-{_numpy_version()}", source, None, 0.0, True)

    def runner(self, artifact: Artifact, region: Region) -> NumpyRunner:
        from .run import NumpyRunner

        return NumpyRunner(region)


lane = NumpyLane()
