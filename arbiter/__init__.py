"""Arbiter: pick the fastest lane for each fused kernel region inside one accuracy budget."""

from __future__ import annotations

from ._api import best, check, lane_table, run, tune
from ._errors import (
    ArbiterError,
    BuildError,
    EmitError,
    InputError,
    LaneError,
    RegionError,
    SpecError,
    StoreError,
)
from ._inputs import input_shapes, output_shape, random_inputs, validate_inputs
from ._lane import Lane, Runner
from ._ops import Epilogue, Pointwise, Reduction
from ._oracle import compare, reference
from ._region import DEFAULT_BUDGET, AttentionRegion, FusedRegion, Region, RowwiseRegion
from ._registry import get_lane, lane_names
from ._spec import Spec, load_spec, parse_spec
from ._values import (
    Artifact,
    Availability,
    Config,
    KernelSource,
    Measurement,
    Platform,
    Rule,
    Space,
    Status,
    Tunable,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_BUDGET", "ArbiterError", "Artifact", "AttentionRegion", "Availability", "BuildError",
    "Config", "EmitError", "Epilogue", "FusedRegion", "InputError", "KernelSource", "Lane",
    "LaneError", "Measurement", "Platform", "Pointwise", "Reduction", "Region", "RegionError",
    "RowwiseRegion", "Rule", "Runner", "Space", "Spec", "SpecError", "Status", "StoreError",
    "Tunable",
    "best", "check", "compare", "get_lane", "input_shapes", "lane_names", "lane_table", "load_spec",
    "output_shape", "parse_spec", "random_inputs", "reference", "run", "tune", "validate_inputs",
]
