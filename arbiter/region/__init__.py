"""What is tuned: the ops, the three region kinds, their arrays, and spec files."""

from __future__ import annotations

from ._ops import Epilogue, Pointwise, Reduction, parse_op
from ._region import (
    DEFAULT_BUDGET,
    SHAPE_FIELDS,
    AttentionRegion,
    FusedRegion,
    Region,
    RowwiseRegion,
    family_of,
    input_shapes,
    is_real,
    output_shape,
    region_from_canonical,
    shape_distance,
    shape_of,
)
from ._spec import Spec, load_spec, parse_spec, parse_table, region_table

__all__ = [
    "DEFAULT_BUDGET", "SHAPE_FIELDS", "AttentionRegion", "Epilogue", "FusedRegion", "Pointwise",
    "Reduction", "Region", "RowwiseRegion", "Spec", "family_of", "input_shapes", "is_real",
    "load_spec", "output_shape", "parse_op", "parse_spec", "parse_table",
    "region_from_canonical", "region_table", "shape_distance", "shape_of",
]
