"""Arbiter: pick the fastest lane for each fused kernel region inside one accuracy budget."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
from ._lane import Lane, Runner
from ._on_use import loader
from ._ops import Epilogue, Pointwise, Reduction
from ._region import DEFAULT_BUDGET, AttentionRegion, FusedRegion, Region, RowwiseRegion
from ._registry import get_lane, lane_names
from ._shapes import input_shapes, output_shape
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

if TYPE_CHECKING:
    from ._api import best, check, lane_table, run, tune
    from ._inputs import random_inputs, validate_inputs
    from ._oracle import compare, reference
    from ._spec import Spec, load_spec, parse_spec

__version__ = "0.1.0"

# Imported on first use, with numpy (0.05-0.1 s) or tomllib: `python -m arbiter._worker_child`
# imports this package before anything else, and its first compile needs none of them.
_ON_USE = {"best": "_api", "check": "_api", "lane_table": "_api", "run": "_api", "tune": "_api",
           "random_inputs": "_inputs", "validate_inputs": "_inputs", "compare": "_oracle",
           "reference": "_oracle", "Spec": "_spec", "load_spec": "_spec", "parse_spec": "_spec"}


__getattr__ = loader(__name__, _ON_USE, globals())


def __dir__() -> list[str]:
    return sorted({*globals(), *_ON_USE})

__all__ = [
    "DEFAULT_BUDGET", "ArbiterError", "Artifact", "AttentionRegion", "Availability", "BuildError",
    "Config", "EmitError", "Epilogue", "FusedRegion", "InputError", "KernelSource", "Lane",
    "LaneError", "Measurement", "Platform", "Pointwise", "Reduction", "Region", "RegionError",
    "RowwiseRegion", "Rule", "Runner", "Space", "Spec", "SpecError", "Status", "StoreError",
    "Tunable",
    "best", "check", "compare", "get_lane", "input_shapes", "lane_names", "lane_table", "load_spec",
    "output_shape", "parse_spec", "random_inputs", "reference", "run", "tune", "validate_inputs",
]
