"""The public plug-in contract: everything a lane imports from the core.

A lane is one object satisfying `Lane`, registered under the `arbiter.lanes` entry-point
group. It states its tunables (`Space`, `Tunable`, `Rule`), emits a `KernelSource` for a
(region, `Config`), builds it into an `Artifact` (the build cache and `run_tool` are here for
compiling lanes) and loads a `Runner` that validates every array before native code runs.
"""

from __future__ import annotations

from .._errors import BuildError, CacheError, EmitError, InputError
from ..region import (
    AttentionRegion,
    Epilogue,
    FusedRegion,
    GatedRegion,
    Pointwise,
    Reduction,
    Region,
    RowwiseRegion,
    input_shapes,
    numpy_dtype,
    output_shape,
)
from ..settings import settings
from ._build import (
    artifact_mismatch,
    build_key,
    cache_root,
    cached_build,
    compiler_identity,
    run_tool,
    version_text,
)
from ._inputs import InputsChanged, validate_inputs, validate_output
from ._protocol import Lane, Runner, refusal
from ._registry import all_lanes, get_lane, lane_names
from ._timing import HOST_METHOD, time_host, usable_cores
from ._values import (
    ENUMERABLE,
    Artifact,
    Availability,
    Config,
    KernelSource,
    Platform,
    Rule,
    Space,
    Status,
    Tunable,
)

__all__ = [
    "Artifact", "AttentionRegion", "Availability", "BuildError", "CacheError", "Config",
    "ENUMERABLE",
    "EmitError", "Epilogue", "FusedRegion", "GatedRegion", "HOST_METHOD", "InputError",
    "InputsChanged",
    "KernelSource", "Lane", "Platform", "Pointwise", "Reduction", "Region", "RowwiseRegion",
    "Rule", "Runner", "Space", "Status", "Tunable", "all_lanes", "artifact_mismatch",
    "build_key", "cache_root", "cached_build",
    "compiler_identity", "get_lane", "input_shapes", "lane_names", "numpy_dtype", "output_shape",
    "refusal", "run_tool", "settings", "time_host", "usable_cores", "validate_inputs",
    "validate_output", "version_text"
]
