"""Arbiter: pick the fastest lane for each fused kernel region inside one accuracy budget.

The flow, one subpackage a stage: `region` (what is tuned) -> `lane` (the plug-in contract)
-> `search` (which candidate next) -> `measure` (build, then check and time in an isolated
worker) with `check` (the float64 oracle) -> `records` (SQLite / PostgreSQL) -> `choose` (who
wins). `api` holds the verbs the CLI, the notebooks and Python callers use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._errors import (
    ArbiterError,
    BuildError,
    CacheError,
    EmitError,
    InputError,
    LaneError,
    RegionError,
    SpecError,
    StoreError,
)

if TYPE_CHECKING:
    from .api import best, run, tune
    from .check import compare, random_inputs, reference
    from .cli.check import check
    from .cli.lanes import lane_table
    from .lane import (
        Artifact,
        Availability,
        Config,
        KernelSource,
        Lane,
        Platform,
        Rule,
        Runner,
        Space,
        Status,
        Tunable,
        get_lane,
        lane_names,
        validate_inputs,
    )
    from .measure import Measurement
    from .region import (
        DEFAULT_BUDGET,
        AttentionRegion,
        Epilogue,
        FusedRegion,
        GatedRegion,
        Pointwise,
        Reduction,
        Region,
        RowwiseRegion,
        Spec,
        input_shapes,
        load_spec,
        output_shape,
        parse_spec,
    )

__version__ = "0.2.0"
# The version of the keys of every row `--json` prints (its `schema` key): raised when a key
# changes meaning or goes away, so a script can tell which form it reads.
JSON_SCHEMA = 1

# loaded on first use: the verbs bring the records (SQLAlchemy), the oracle and the worker;
# the values numpy (and ml_dtypes). So `arbiter` the command reaches its own code, which ends
# on Ctrl-C in one line, before anything slow is imported.
_LAZY = {"best": "api", "run": "api", "tune": "api", "check": "cli.check",
         "lane_table": "cli.lanes", "compare": "check", "random_inputs": "check",
         "reference": "check", "Measurement": "measure",
         **dict.fromkeys(("Artifact", "Availability", "Config", "KernelSource", "Lane",
                          "Platform", "Rule", "Runner", "Space", "Status", "Tunable",
                          "get_lane", "lane_names", "validate_inputs"), "lane"),
         **dict.fromkeys(("DEFAULT_BUDGET", "AttentionRegion", "Epilogue", "FusedRegion",
                          "GatedRegion", "Pointwise", "Reduction", "Region", "RowwiseRegion",
                          "Spec", "input_shapes", "load_spec", "output_shape", "parse_spec"),
                         "region")}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "ArbiterError", "Artifact", "AttentionRegion", "Availability", "BuildError", "CacheError",
    "Config",
    "DEFAULT_BUDGET", "EmitError", "Epilogue", "FusedRegion", "GatedRegion", "InputError",
    "KernelSource", "Lane", "LaneError", "Measurement", "Platform", "Pointwise", "Reduction",
    "Region", "RegionError", "RowwiseRegion", "Rule", "Runner", "Space", "Spec", "SpecError",
    "Status", "StoreError", "Tunable", "best", "check", "compare", "get_lane", "input_shapes",
    "lane_names", "lane_table", "load_spec", "output_shape", "parse_spec", "random_inputs",
    "reference", "run", "tune", "validate_inputs"
]
